"""`inferd optimize` and `inferd quantize` refuse to write a version that is worse than its
source (here: larger, which is deterministic; measured slowness is decided by the same verdict,
tested in tests/unit/prep/test_worth.py), say why in one line, and write it with --force."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferd.cli.main import main


def _export(repo: Path, model: str, factory: str) -> None:
    args = ["export", f"tests.prep_modules:{factory}", "--input", "x:batch,16:float32"]
    assert main([*args, "--repo", str(repo), "--model", model]) == 0


def _refusal(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if "nothing written" in line]
    assert len(lines) == 1, lines
    return lines[0]


def test_optimize_refuses_a_larger_version_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _export(tmp_path, "wide", "widen")
    capsys.readouterr()
    assert main(["optimize", "--repo", str(tmp_path), "--model", "wide"]) == 1
    line = _refusal(capsys)
    assert "larger than the source version" in line and "--force writes it anyway" in line
    assert not (tmp_path / "wide" / "2").exists()
    report = json.loads((tmp_path / ".inferd/reports/wide/optimize-2.json").read_text())
    assert report["size_ratio"] > 10 and report["problems"] and not report["forced"]
    assert report["speed"]["rounds"] >= 15

    assert main(["optimize", "--repo", str(tmp_path), "--model", "wide", "--force"]) == 0
    assert (tmp_path / "wide" / "2" / "model.onnx").is_file()
    assert "written despite: larger" in capsys.readouterr().err


def test_quantize_refuses_an_int8_mlp_that_is_larger_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _export(tmp_path, "mlp", "mlp")
    capsys.readouterr()
    assert main(["quantize", "--repo", str(tmp_path), "--model", "mlp", "--count", "64"]) == 1
    line = _refusal(capsys)
    assert "larger than fp32" in line
    assert not (tmp_path / "mlp" / "2").exists()
    report = json.loads((tmp_path / ".inferd/reports/mlp/quantize-2-int8.json").read_text())
    assert report["size_ratio"] > 1.01
    forced = ["quantize", "--repo", str(tmp_path), "--model", "mlp", "--count", "64", "--force"]
    assert main(forced) == 0
    assert (tmp_path / "mlp" / "2" / "model.onnx").is_file()
