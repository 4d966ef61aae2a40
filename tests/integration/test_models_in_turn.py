"""Models served one request at a time, in turn, on a real server: each answers at once,
whatever model ran just before (no run waits for another model's turn until its deadline)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.integration.server import start_server
from tests.models import affine_model, fixed_model, half_model, write_config

REQUESTS = {
    "affine": {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4], "data": [1] * 12}]},
    "half": {"inputs": [{"name": "x", "datatype": "FP16", "shape": [1, 3], "data": [0.5] * 3}]},
    "fixed": {"inputs": [{"name": "x", "datatype": "FP64", "shape": [2, 2], "data": [1] * 4}]},
}


def test_models_in_turn_each_answer_at_once(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    affine_model(root / "affine" / "1" / "model.onnx")
    write_config(root / "affine", {"max_batch_size": 8})
    half_model(root / "half" / "1" / "model.onnx")
    fixed_model(root / "fixed" / "1" / "model.onnx")
    write_config(root / "fixed", {"max_batch_size": 0})
    running = start_server(root, tmp_path / "server.log", "--request-timeout-s", "5")
    try:
        slowest = 0.0
        with httpx.Client(base_url=running.url, timeout=30) as http:
            for _ in range(30):
                for model, body in REQUESTS.items():
                    started = time.perf_counter()
                    answer = http.post(f"/v2/models/{model}/infer", json=body)
                    slowest = max(slowest, time.perf_counter() - started)
                    assert answer.status_code == 200, (model, answer.text)
        # far under the 5 s deadline each would otherwise wait out
        assert slowest < 2.5, f"the slowest answer took {slowest:.2f} s"
    finally:
        assert running.stop() == 0, running.log()
