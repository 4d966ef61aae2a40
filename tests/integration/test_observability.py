"""Logs and metrics of a real server after real traffic: the counts match what was sent."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.server import RunningServer, start_server


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def body(rows: int) -> dict[str, Any]:
    x = np.ones((rows, 4), dtype=np.float32)
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 4], "data": x.tolist()}]}


def log_lines(server: RunningServer) -> list[dict[str, Any]]:
    lines = []
    for line in server.log().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_requests_without_inference_count_under_their_model(client: httpx.Client) -> None:
    before = scrape(client)
    paths = [
        "/v2/models/multi",
        "/v2/models/multi/config",
        "/v2/models/multi/ready",
        "/v2/models/multi/stats",
        "/v2",
    ]
    for path in paths:
        assert client.get(path).status_code == 200
    after = scrape(client)
    for path in paths[:-1]:
        endpoint = path.replace("multi", "{model}")
        labels = {"endpoint": endpoint, "model": "multi", "status": "200", "code": "0"}
        delta = value(after, "inferd_requests_total", **labels)
        assert delta - value(before, "inferd_requests_total", **labels) == 1, endpoint
    server_wide = {"endpoint": "/v2", "model": "", "status": "200", "code": "0"}
    assert value(after, "inferd_requests_total", **server_wide) >= 1  # about no model
    assert not any(
        dict(key[1]).get("model") == "_unknown" and dict(key[1]).get("status") == "200"
        for key in after
    )


def test_metrics_count_what_was_sent(client: httpx.Client) -> None:
    endpoint = "/v2/models/{model}/versions/{version}/infer"
    before = scrape(client)
    for _ in range(7):
        assert (
            client.post("/v2/models/multi/versions/1/infer", json={"inputs": []}).status_code == 400
        )
    good = {
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [2, 3], "data": [1.0] * 6},
            {"name": "b", "datatype": "INT32", "shape": [2, 3], "data": [1] * 6},
            {"name": "tag", "datatype": "BYTES", "shape": [2, 1], "data": ["x", "y"]},
        ]
    }
    for _ in range(5):
        assert client.post("/v2/models/multi/versions/1/infer", json=good).status_code == 200
    for _ in range(3):
        assert client.post("/v2/models/made-up-name/infer", json=good).status_code == 404
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    ok = {"endpoint": endpoint, "model": "multi", "status": "200", "code": "0"}
    assert delta("inferd_requests_total", **ok) == 5
    bad = {"endpoint": endpoint, "model": "multi", "status": "400", "code": "4004"}
    assert delta("inferd_requests_total", **bad) == 7  # failed validation: the path names it
    unknown = {
        "endpoint": "/v2/models/{model}/infer",
        "model": "_unknown",
        "status": "404",
        "code": "4040",
    }
    assert delta("inferd_requests_total", **unknown) == 3
    assert not any("made-up-name" in str(key) for key in after)  # bounded label values
    assert delta("inferd_batch_size_sum", model="multi", version="1") == 10
    assert (
        delta("inferd_stage_duration_seconds_count", model="multi", version="1", stage="inference")
        == 5
    )
    assert value(after, "inferd_model_ready", model="affine", version="1") == 1
    assert value(after, "inferd_model_ready", model="broken", version="1") == 0
    assert value(after, "inferd_queue_depth", model="affine", version="2") == 0
    assert value(after, "process_resident_memory_bytes") > 10 * 2**20
    assert ("inferd_in_flight_requests", ()) in after
    assert not any(name.startswith("inferd_gpu") for name, _ in after)  # no GPU here


def test_log_lines_are_json_with_stage_timings_and_no_payload(
    client: httpx.Client, server: RunningServer
) -> None:
    secret = 424242.5
    x = {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [secret, 1, 2, 3]}
    response = client.post(
        "/v2/models/affine/infer", json={"inputs": [x]}, headers={"X-Request-ID": "log-me-1"}
    )
    assert response.status_code == 200
    bad = client.post(
        "/v2/models/affine/infer",
        json={"inputs": [{**x, "shape": [1, 5]}]},
        headers={"X-Request-ID": "log-me-2"},
    )
    assert bad.status_code == 400
    time.sleep(0.2)
    lines = {line.get("request_id"): line for line in log_lines(server)}
    ok = lines["log-me-1"]
    for key in (
        "ts",
        "level",
        "event",
        "model",
        "version",
        "status",
        "queue_ms",
        "preprocess_ms",
        "inference_ms",
        "postprocess_ms",
        "total_ms",
        "batch_size",
        "input_length",
        "output_length",
    ):
        assert key in ok, key
    assert ok["event"] == "request" and ok["status"] == 200 and ok["model"] == "affine"
    assert ok["input_length"] == 4 and ok["batch_size"] >= 1
    assert ok["total_ms"] >= ok["inference_ms"] >= 0
    failed = lines["log-me-2"]
    assert failed["status"] == 400 and failed["code"] == 4004 and failed["level"] == "warning"
    assert bad.json()["request_id"] == bad.headers["x-request-id"] == "log-me-2"
    assert str(secret) not in server.log() and "424242" not in server.log()


@pytest.fixture(scope="module")
def drift_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    from inferd.tools.demo import build_demo

    root = build_demo(tmp_path_factory.mktemp("drift") / "repo")
    for name in ("minilm", "sentiment"):
        path = root / name / "config.yaml"
        config = yaml.safe_load(path.read_text())
        config["drift"] = {"reference_size": 400, "window": 300, "threshold": 0.2}
        path.write_text(yaml.safe_dump(config))
    log = tmp_path_factory.mktemp("drift-logs") / "server.log"
    server = start_server(root, log, "--log-payloads", "--log-sample-rate", "1")
    yield server
    assert server.stop() == 0


def test_drift_gauge_crosses_the_threshold_when_texts_degenerate(
    drift_server: RunningServer, tmp_path: Path
) -> None:
    from tests.text_corpus import sentences

    pool = sentences(150)
    rng = np.random.default_rng(5)
    normal = [pool[i] for i in rng.integers(0, len(pool), 700)]  # one population, shuffled
    with httpx.Client(base_url=drift_server.url, timeout=60) as client:
        for i in range(0, 700, 10):
            response = client.post(
                "/predict", json={"model": "sentiment", "texts": normal[i : i + 10]}
            )
            assert response.status_code == 200
        calm = value(scrape(client), "inferd_drift_psi", model="sentiment", feature="input_length")
        for _ in range(30):
            client.post("/predict", json={"model": "sentiment", "texts": ["ok"] * 10})
        samples = scrape(client)
    drifted = value(samples, "inferd_drift_psi", model="sentiment", feature="input_length")
    assert calm < 0.2 < drifted
    assert value(samples, "inferd_predicted_labels_total", model="sentiment", label="positive") > 0
    assert value(samples, "inferd_input_length_tokens_count", model="sentiment") >= 1000
    warnings = [
        line
        for line in log_lines(drift_server)
        if line.get("event") == "input drift over threshold"
    ]
    # the base model sees the same texts, so it drifts too
    assert {w["model"] for w in warnings} == {"sentiment", "minilm"}


def test_payload_logging_when_asked_is_truncated_and_marked(drift_server: RunningServer) -> None:
    text = "distinctive-payload-" + "x" * 1000
    httpx.post(drift_server.url + "/embed", json={"model": "minilm", "texts": [text]}, timeout=30)
    time.sleep(0.2)
    logged = [line for line in log_lines(drift_server) if "payload" in line]
    assert logged
    payload = logged[-1]["payload"]
    assert payload.startswith("[PAYLOAD") and "distinctive-payload-" in payload
    assert "more bytes]" in payload and len(payload) < 400
