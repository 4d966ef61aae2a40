from __future__ import annotations

from pathlib import Path

import pytest

from inferd.config.model import VersionPolicy
from inferd.errors import ConfigError
from inferd.repository import scan_repository, valid_name


def touch_version(root: Path, model: str, version: str) -> None:
    folder = root / model / version
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"x")


def test_versions_and_default_policy_serve_the_latest(tmp_path: Path) -> None:
    for v in ("1", "2", "10"):
        touch_version(tmp_path, "m", v)
    (entry,) = scan_repository(tmp_path)
    assert entry.error is None
    assert [v.version for v in entry.versions] == [10]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({"latest": 2}, [2, 3]),
        ({"all": True}, [1, 2, 3]),
        ({"specific": [1, 3, 7]}, [1, 3]),
    ],
)
def test_version_policies(tmp_path: Path, policy: dict[str, object], expected: list[int]) -> None:
    for v in ("1", "2", "3"):
        touch_version(tmp_path, "m", v)
    (tmp_path / "m" / "config.yaml").write_text(
        "version_policy: " + str(policy).replace("'", '"').replace("True", "true") + "\n"
    )
    (entry,) = scan_repository(tmp_path)
    assert [v.version for v in entry.versions] == expected


def test_a_policy_with_two_choices_is_rejected() -> None:
    with pytest.raises(ValueError):
        VersionPolicy(latest=1, all=True)


def test_bad_config_marks_that_model_only(tmp_path: Path) -> None:
    touch_version(tmp_path, "good", "1")
    touch_version(tmp_path, "bad", "1")
    (tmp_path / "bad" / "config.yaml").write_text("max_batch_size: -1\nsurprise: 1\n")
    bad, good = scan_repository(tmp_path)
    assert good.error is None and bad.error is not None
    assert "config.yaml" in bad.error and "surprise" in bad.error and "max_batch_size" in bad.error


def test_version_folder_without_model_file_is_skipped_with_a_reason(tmp_path: Path) -> None:
    touch_version(tmp_path, "m", "1")
    (tmp_path / "m" / "2").mkdir()
    (entry,) = scan_repository(tmp_path)
    assert [v.version for v in entry.versions] == [1]
    assert entry.skipped[0].version == 2 and "model.onnx" in (entry.skipped[0].error or "")


def test_model_without_versions_is_reported(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (entry,) = scan_repository(tmp_path)
    assert entry.error is not None and "version" in entry.error


def test_missing_repository_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        scan_repository(tmp_path / "nope")


@pytest.mark.parametrize("name", ["..", "a/b", ".hidden", "", "a b", "x" * 200])
def test_names_that_could_escape_or_hide_are_invalid(name: str) -> None:
    assert not valid_name(name)


@pytest.mark.parametrize("name", ["minilm", "bert-base_v2", "m.1"])
def test_plain_names_are_valid(name: str) -> None:
    assert valid_name(name)
