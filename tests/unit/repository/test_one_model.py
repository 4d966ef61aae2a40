"""A repository of one model: its model file at the top, as KServe's storage initializer lays
out /mnt/models, served as version 1 under the name the server gives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.errors import ConfigError
from inferd.repository.scan import ONE_MODEL_NAME, scan_model, scan_repository


def one_model(root: Path, config: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.onnx").write_bytes(b"onnx bytes are not read by the scan")
    (root / "tokenizer.json").write_text("{}")
    if config is not None:
        (root / "config.yaml").write_text(config)
    return root


def test_the_top_model_file_is_version_one_named_by_the_server(tmp_path: Path) -> None:
    root = one_model(tmp_path / "mnt" / "models", "task: embedding\n")
    (entry,) = scan_repository(root, "minilm")
    assert entry.error is None and entry.name == "minilm" and entry.folder == root
    assert [(v.version, v.path) for v in entry.versions] == [(1, root / "model.onnx")]
    assert entry.config is not None and entry.config.task == "embedding"


def test_without_a_name_its_configs_name_or_model(tmp_path: Path) -> None:
    (plain,) = scan_repository(one_model(tmp_path / "a"))
    assert plain.name == ONE_MODEL_NAME and plain.error is None
    (named,) = scan_repository(one_model(tmp_path / "b", "name: encoder\n"))
    assert named.name == "encoder" and named.error is None
    # the watcher reads a served model's folder again: the same version, whatever the name
    assert [v.version for v in scan_model(tmp_path / "b").available] == [1]


def test_the_servers_name_wins_and_a_name_that_is_not_one_is_said(tmp_path: Path) -> None:
    # KServe names the model after its InferenceService, whatever the config's name says
    (entry,) = scan_repository(one_model(tmp_path / "a", "name: encoder\n"), "other")
    assert entry.error is None and entry.name == "other"
    with pytest.raises(ConfigError, match="not a valid model name"):
        scan_repository(one_model(tmp_path / "b"), "../escape")


def test_a_repository_of_many_models_is_read_as_before(tmp_path: Path) -> None:
    one_model(tmp_path / "repo" / "first" / "1")
    one_model(tmp_path / "repo" / "second" / "3")
    entries = scan_repository(tmp_path / "repo", "ignored")
    assert [(e.name, [v.version for v in e.versions]) for e in entries] == [
        ("first", [1]),
        ("second", [3]),
    ]
