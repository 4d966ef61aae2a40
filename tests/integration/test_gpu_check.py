"""The GPU check's dry run: every step `benchmarks/gpu_check.py` takes on a GPU machine (the
exports, raw and served loads, the raw decode ceiling, out of memory, placement and metrics),
taken on the CPU provider with small models, so the script a short GPU lease runs is known to
run end to end (its figures mean nothing here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_gpu_check_runs_every_step_on_the_cpu(tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    done = subprocess.run(
        [sys.executable, "gpu_check.py", "--dry-run", "--report", str(report)],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = report.read_text().splitlines()
    assert not [line for line in lines if line.startswith("[FAIL]")]
    text = "\n".join(lines)
    for step in (
        "raw ONNX Runtime on the CPU (dry run)",
        "encoder texts/s",
        "encoder-fp16 texts/s",
        "encoder served, where the time goes: ",
        "emulated h200-fp32 texts/s: device 3299, served ",
        "gen tokens/s at 16 in flight",
        "gen-host tokens/s at 1 in flight",
        "inferd quantize --to fp16 of the in-place decoder",
        "fp16 decoder against fp32: greedy agreement",
        "gen-fp16 tokens/s at 16 in flight",
        "gen-fp16-host tokens/s at 1 in flight",
        "over the arena: answered",
        "the server serves on after out of memory",
        "an fp16 model answers FP16",
        "per-instance metrics for cpu-0",
    ):
        assert step in text, (step, text)
