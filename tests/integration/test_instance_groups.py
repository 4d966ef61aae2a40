"""Instance groups on a real server: two CPU instances share the load and report it per
instance (V2 statistics, /metrics, V2 config); a GPU group on this machine (no GPU, the CPU
build of onnxruntime) fails its load with the reason, and the other models serve."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.integration.server import RunningServer, start_server
from tests.models import affine_model, write_config


@pytest.fixture(scope="module")
def grouped_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("groups")
    affine_model(root / "grouped" / "1" / "model.onnx")
    write_config(
        root / "grouped",
        {
            "max_batch_size": 4,
            "dynamic_batching": {"max_queue_delay_ms": 1},
            "instance_groups": [{"count": 2, "kind": "cpu", "threads": 1}],
        },
    )
    affine_model(root / "ongpu" / "1" / "model.onnx")
    write_config(root / "ongpu", {"instance_groups": [{"kind": "gpu", "gpus": [1]}]})
    running = start_server(root, tmp_path_factory.mktemp("logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def _infer(url: str, value: float) -> list[float]:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [value] * 4}]}
    response = httpx.post(url + "/v2/models/grouped/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    data: list[float] = response.json()["outputs"][0]["data"]
    return data


def test_two_cpu_instances_share_the_work_and_report_it(grouped_server: RunningServer) -> None:
    url = grouped_server.url
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: _infer(url, float(i)), range(400)))
    for i, answer in enumerate(answers):  # each request its own answer (affine: 2x + 1)
        np.testing.assert_allclose(answer, [2.0 * i + 1.0] * 4)

    stats = httpx.get(url + "/v2/models/grouped/stats").json()["model_stats"][0]
    instances = {i["name"]: i for i in stats["instance_stats"]}
    assert set(instances) == {"cpu-0", "cpu-1"}
    assert all(i["kind"] == "cpu" for i in instances.values())
    assert sum(i["batches"] for i in instances.values()) == stats["execution_count"]
    assert sum(i["elements"] for i in instances.values()) == 4 * stats["inference_count"]
    assert all(i["batches"] > 0 and i["us_per_element"] > 0 for i in instances.values())
    assert all(i["queued_batches"] == 0 and i["failures"] == 0 for i in instances.values())

    metrics = httpx.get(url + "/metrics").text
    for name in ("cpu-0", "cpu-1"):
        labels = f'instance="{name}",kind="cpu",model="grouped",version="1"'
        batches = instances[name]["batches"]
        assert f"inferd_instance_batches_total{{{labels}}} {float(batches)}" in metrics
        for family in (
            "inferd_instance_busy_seconds_total",
            "inferd_instance_queued_batches",
            "inferd_instance_seconds_per_element",
            "inferd_instance_failures_total",
        ):
            assert f"{family}{{{labels}}}" in metrics

    config = httpx.get(url + "/v2/models/grouped/config").json()
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]


def test_a_gpu_group_without_a_gpu_fails_its_load_and_says_why(
    grouped_server: RunningServer,
) -> None:
    url = grouped_server.url
    assert httpx.get(url + "/v2/models/ongpu/ready").status_code != 200
    index = {r["name"]: r for r in httpx.post(url + "/v2/repository/index").json()}
    assert index["ongpu"]["state"] == "FAILED"
    assert "GPU 1 needs a GPU provider" in index["ongpu"]["reason"]
    assert index["grouped"]["state"] == "READY"
    ready = httpx.get(url + "/v2/health/ready").json()
    assert "ongpu" in ready["reason"]
    config = httpx.get(url + "/v2/models/grouped/config")
    assert config.status_code == 200
    assert _infer(url, 1.0) == [3.0] * 4


def test_statistics_over_a_path_with_no_version(grouped_server: RunningServer) -> None:
    every = httpx.get(grouped_server.url + "/v2/models/stats").json()["model_stats"]
    assert {s["name"] for s in every} >= {"grouped"}
    assert all(isinstance(s["instance_stats"], list) for s in every)
