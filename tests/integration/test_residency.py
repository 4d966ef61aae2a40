"""Many models on one box: on-demand models load on their first request, the least recently
used idle ones are evicted to stay within the server's count or memory budget, a version in use
never is, and nothing serving is harmed by a load that cannot fit."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.server import RunningServer, start_server
from tests.models import affine_model, big_model, slow_model, write_config

MODELS = [f"m{i}" for i in range(6)]
ON_DEMAND = {"max_batch_size": 8, "residency": "on_demand", "runtime": {"intra_op_threads": 1}}
UNLIMITED = ("--client-loads-per-minute", "0")
"""These tests cause many loads from one address: no limit on a client's loads
(tests/integration/test_client_limits.py tests it)."""


def affine_body(value: float = 1.0) -> dict[str, Any]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [value] * 4}]}


def wide_body() -> dict[str, Any]:
    x = np.full((1, 512), 0.5, dtype=np.float32).tolist()
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 512], "data": x}]}


def infer(url: str, model: str, value: float = 1.0) -> httpx.Response:
    return httpx.post(f"{url}/v2/models/{model}/infer", json=affine_body(value), timeout=60)


def metrics(url: str) -> dict[tuple[str, str], float]:
    """(metric name, model) -> value, for the residency families."""
    found: dict[tuple[str, str], float] = {}
    text = httpx.get(url + "/metrics", timeout=10).text
    for name, model, value in re.findall(
        r"^(inferd_model_(?:resident|resident_bytes|loads_on_demand_total|evictions_total|"
        r'cold_waits_total))\{model="([^"]+)",[^}]*\} (\S+)$',
        text,
        re.M,
    ):
        found[name, model] = float(value)
    return found


def resident(url: str) -> set[str]:
    return {m for (name, m), v in metrics(url).items() if name == "inferd_model_resident" and v}


def per_model(seen: dict[tuple[str, str], float], metric: str) -> dict[str, float]:
    return {model: value for (name, model), value in seen.items() if name == metric}


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Six on-demand affine models, a slow on-demand one, and a pinned one; at most three
    versions in memory."""
    root = tmp_path_factory.mktemp("residency-repo")
    for name in MODELS:
        affine_model(root / name / "1" / "model.onnx")
        write_config(root / name, ON_DEMAND)
    slow_model(root / "slow" / "1" / "model.onnx", layers=2048, width=512)
    write_config(
        root / "slow",
        {**ON_DEMAND, "max_batch_size": 1, "dynamic_batching": {"max_queue_time_ms": None}},
    )
    affine_model(root / "pinned" / "1" / "model.onnx")
    write_config(root / "pinned", {"max_batch_size": 8})
    log = tmp_path_factory.mktemp("residency-logs") / "server.log"
    running = start_server(root, log, "--max-loaded-versions", "3", *UNLIMITED)
    yield running
    assert running.stop() == 0, running.log()


def test_on_demand_models_are_not_loaded_at_start_and_the_server_is_ready(
    counted: RunningServer,
) -> None:
    assert httpx.get(counted.url + "/ready", timeout=5).status_code == 200
    index = httpx.post(counted.url + "/v2/repository/index", json={}, timeout=5).json()
    states = {row["name"]: row for row in index}
    assert states["pinned"]["state"] == "READY"
    for name in MODELS:
        assert states[name]["state"] == "UNLOADED", states[name]
        assert "on demand" in states[name]["reason"]
    # a client that asks first is told the model can serve
    ready = httpx.get(f"{counted.url}/v2/models/m0/ready", timeout=5)
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert resident(counted.url) == {"pinned"}


def test_the_least_recently_used_idle_model_is_evicted_and_loads_again_when_asked(
    counted: RunningServer,
) -> None:
    url = counted.url
    for name in ("m0", "m1"):  # the pinned model and these two: three, the limit
        answer = infer(url, name, 2.0)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [5.0] * 4
    assert resident(url) == {"pinned", "m0", "m1"}
    infer(url, "m0")  # m1 is now the least recently used
    assert infer(url, "m2").status_code == 200
    assert resident(url) == {"pinned", "m0", "m2"}
    seen = metrics(url)
    assert seen["inferd_model_evictions_total", "m1"] == 1
    assert seen["inferd_model_loads_on_demand_total", "m0"] == 1  # loaded once, kept
    assert infer(url, "m1").status_code == 200  # back, in place of m0
    assert resident(url) == {"pinned", "m2", "m1"}
    assert metrics(url)["inferd_model_loads_on_demand_total", "m1"] == 2
    log = counted.log()
    assert "model version evicted" in log and "model version loaded on demand" in log


def test_requests_arriving_for_a_cold_model_wait_for_one_load(counted: RunningServer) -> None:
    url = counted.url
    before = metrics(url).get(("inferd_model_loads_on_demand_total", "m3"), 0.0)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda v: infer(url, "m3", v), [float(i) for i in range(8)]))
    assert [a.status_code for a in answers] == [200] * 8
    assert [a.json()["outputs"][0]["data"][0] for a in answers] == [2 * i + 1 for i in range(8)]
    # what each waited for the load is in its Server-Timing (at least the first one did)
    waited = [re.search(r"load;dur=([\d.]+)", a.headers["server-timing"]) for a in answers]
    assert any(w is not None and float(w.group(1)) > 0 for w in waited), waited
    warm = infer(url, "m3")
    assert "load;dur" not in warm.headers["server-timing"]
    seen = metrics(url)
    assert seen["inferd_model_loads_on_demand_total", "m3"] == before + 1
    assert seen["inferd_model_cold_waits_total", "m3"] >= 1
    # metadata a client reads first loads the model too
    meta = httpx.get(f"{url}/v2/models/m4", timeout=30)
    assert meta.status_code == 200 and meta.json()["inputs"][0]["name"] == "x"


def test_a_model_with_a_request_in_flight_is_never_evicted(counted: RunningServer) -> None:
    url = counted.url
    x = np.full((1, 512), 0.5, dtype=np.float32)
    slow_body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 512], "data": x.tolist()}]
    }
    assert httpx.post(f"{url}/v2/models/slow/infer", json=slow_body, timeout=60).status_code == 200
    stop = threading.Event()
    slow_codes: list[int] = []

    def keep_slow_busy() -> None:  # a request to it always in flight or queued
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                slow_codes.append(client.post("/v2/models/slow/infer", json=slow_body).status_code)

    workers = [threading.Thread(target=keep_slow_busy) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.2)
        others = []
        for name in ("m0", "m5", "m1", "m2", "m5", "m0"):  # every load needs an eviction
            others.append(infer(url, name).status_code)
            assert "slow" in resident(url)
        assert others == [200] * 6
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert slow_codes and set(slow_codes) == {200}
    assert metrics(url).get(("inferd_model_evictions_total", "slow"), 0.0) == 0


def test_a_load_waits_for_a_busy_version_to_go_idle_within_its_deadline(tmp_path: Path) -> None:
    """The count is full (a pinned model and a busy on-demand one): a cold model's load waits
    for the busy one to go idle. A request whose deadline ends first is refused 5030 with the
    reason, and nothing serving is touched; one that can wait is served once it went idle."""
    root = tmp_path / "repo"
    slow_model(root / "busy" / "1" / "model.onnx", layers=4096, width=512)
    write_config(
        root / "busy",
        {**ON_DEMAND, "max_batch_size": 1, "dynamic_batching": {"max_queue_time_ms": None}},
    )
    affine_model(root / "cold" / "1" / "model.onnx")
    write_config(root / "cold", ON_DEMAND)
    affine_model(root / "pinned" / "1" / "model.onnx")
    write_config(root / "pinned", {"max_batch_size": 8})
    running = start_server(root, tmp_path / "server.log", "--max-loaded-versions", "2", *UNLIMITED)
    try:
        url = running.url
        body = wide_body()
        assert httpx.post(f"{url}/v2/models/busy/infer", json=body, timeout=60).status_code == 200
        with ThreadPoolExecutor(16) as pool:  # 16 in flight or queued: a second of work
            held = [
                pool.submit(httpx.post, f"{url}/v2/models/busy/infer", json=body, timeout=60)
                for _ in range(16)
            ]
            time.sleep(0.2)
            started = time.perf_counter()
            refused = httpx.post(
                f"{url}/v2/models/cold/infer",
                json=affine_body(),
                headers={"X-Request-Timeout-Ms": "300"},
                timeout=60,
            )
            refused_after = time.perf_counter() - started
            assert resident(url) == {"pinned", "busy"}
            waited = infer(url, "cold", 2.0)  # busy goes idle once its 16 are answered
            codes = [h.result().status_code for h in held]
        assert codes == [200] * 16
        assert refused.status_code == 503, refused.text
        answer = refused.json()
        assert answer["code"] == 5030 and "max_loaded_versions 2" in answer["error"], answer
        assert refused.headers.get("retry-after") is not None
        assert 0.25 < refused_after < 2.0, refused_after
        assert waited.status_code == 200, waited.text
        assert waited.json()["outputs"][0]["data"] == [5.0] * 4
        assert "load;dur" in waited.headers["server-timing"]
        assert resident(url) == {"pinned", "cold"}
        assert metrics(url)["inferd_model_evictions_total", "busy"] == 1
    finally:
        assert running.stop() == 0, running.log()


def test_a_load_that_cannot_fit_with_nothing_to_evict_is_refused_at_once(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in ("pinned", "cold"):
        affine_model(root / name / "1" / "model.onnx")
    write_config(root / "pinned", {"max_batch_size": 8})
    write_config(root / "cold", ON_DEMAND)
    running = start_server(root, tmp_path / "server.log", "--max-loaded-versions", "1", *UNLIMITED)
    try:
        started = time.perf_counter()
        refused = infer(running.url, "cold")  # the default deadline: a minute
        assert time.perf_counter() - started < 2.0
        assert refused.status_code == 503, refused.text
        answer = refused.json()
        assert answer["code"] == 5030 and "max_loaded_versions 1" in answer["error"], answer
        assert refused.headers.get("retry-after") is not None
        assert infer(running.url, "pinned").status_code == 200
        assert resident(running.url) == {"pinned"}
    finally:
        assert running.stop() == 0, running.log()


def test_an_admins_load_is_held_to_the_count(tmp_path: Path) -> None:
    """An admin's load of an on-demand model makes room as a request's does: the idle
    on-demand model goes, the count holds."""
    root = tmp_path / "repo"
    for name in ("m0", "m1", "pinned"):
        affine_model(root / name / "1" / "model.onnx")
        write_config(root / name, ON_DEMAND if name != "pinned" else {"max_batch_size": 8})
    keys = tmp_path / "admin.keys"
    keys.write_text("residency-admin\n")
    running = start_server(
        root,
        tmp_path / "server.log",
        "--max-loaded-versions",
        "2",
        "--admin-keys-file",
        str(keys),
        *UNLIMITED,
    )
    try:
        url = running.url
        assert infer(url, "m0").status_code == 200
        loaded = httpx.post(
            f"{url}/v2/repository/models/m1/load",
            headers={"Authorization": "Bearer residency-admin"},
            timeout=60,
        )
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["evicted"] == [{"name": "m0", "version": "1"}]
        assert resident(url) == {"pinned", "m1"}
        seen = metrics(url)
        assert seen["inferd_model_evictions_total", "m0"] == 1
        assert seen["inferd_model_loads_on_demand_total", "m1"] == 1
        answer = infer(url, "m1", 3.0)
        assert answer.json()["outputs"][0]["data"] == [7.0] * 4
        assert "load;dur" not in answer.headers["server-timing"]
    finally:
        assert running.stop() == 0, running.log()


def test_the_memory_budget_holds_the_measured_footprints_of_what_is_loaded(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    names = [f"big{i}" for i in range(4)]
    for name in names:
        big_model(root / name / "1" / "model.onnx", 48)
        write_config(root / name, ON_DEMAND)
    budget_mb = 160
    running = start_server(
        root, tmp_path / "server.log", "--model-memory-budget-mb", "160", *UNLIMITED
    )
    try:
        url = running.url
        for name in [*names, *names]:
            answer = infer(url, name, 3.0)
            assert answer.status_code == 200, answer.text
            assert answer.json()["outputs"][0]["data"] == [3.0] * 4
            seen = metrics(url)
            held = per_model(seen, "inferd_model_resident")
            footprints = per_model(seen, "inferd_model_resident_bytes")
            assert held[name] == 1
            in_memory = sum(footprints[model] for model, on in held.items() if on)
            assert in_memory <= budget_mb * 2**20, (name, footprints, held)
        seen = metrics(url)
        measured = per_model(seen, "inferd_model_resident_bytes")
        assert len(measured) == 4 and min(measured.values()) >= 40 * 2**20, measured  # ~48 MB
        assert sum(per_model(seen, "inferd_model_evictions_total").values()) >= 4
    finally:
        assert running.stop() == 0, running.log()


def test_a_model_that_can_never_fit_is_said_at_once_and_one_whose_estimate_does_not_loads(
    tmp_path: Path,
) -> None:
    """A memory budget smaller than one model's files: its first request gets 5071 at once
    (never a 503 to retry for ever), saying the budget it needs, and `/ready` names it. A
    model whose files fit but whose estimate before any load (twice its files) does not
    loads alone, is measured, and serves."""
    root = tmp_path / "repo"
    big_model(root / "big" / "1" / "model.onnx", 48)
    write_config(root / "big", ON_DEMAND)
    affine_model(root / "pinned" / "1" / "model.onnx")
    write_config(root / "pinned", {"max_batch_size": 8})
    running = start_server(
        root, tmp_path / "small.log", "--model-memory-budget-mb", "30", *UNLIMITED
    )
    try:
        # a model that can never load is a reason not to be ready, as a failed one is
        ready = httpx.get(running.url + "/ready", timeout=10)
        assert ready.status_code == 503, ready.text
        body = ready.json()
        assert "'big' version 1 can never load under the 30.0 MB memory budget" in body["reason"]
        assert body["models"]["big"]["ready"] is False and body["models"]["pinned"]["ready"]
        started = time.perf_counter()
        refused = infer(running.url, "big")
        assert time.perf_counter() - started < 2.0
        assert refused.status_code == 507, refused.text
        answer = refused.json()
        assert answer["code"] == 5071 and "needs more than 48" in answer["error"], answer
        # what it needs beside what the pinned model holds (measured at its load)
        needed = re.search(r"give the budget at least ([\d.]+) MB", answer["error"])
        assert needed and 48 < float(needed.group(1)) < 80, answer
        assert refused.headers.get("retry-after") is None
        assert infer(running.url, "pinned").status_code == 200
    finally:
        assert running.stop() == 0, running.log()
    running = start_server(
        root, tmp_path / "roomy.log", "--model-memory-budget-mb", "80", *UNLIMITED
    )
    try:
        answer = infer(running.url, "big", 3.0)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [3.0] * 4
        footprint = per_model(metrics(running.url), "inferd_model_resident_bytes")["big"]
        assert 40 * 2**20 <= footprint <= 80 * 2**20, footprint
    finally:
        assert running.stop() == 0, running.log()
