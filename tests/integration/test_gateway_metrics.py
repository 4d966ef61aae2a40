"""The Gateway API Inference Extension's model-server protocol on a live server: the families
its endpoint picker scrapes, with the protocol's types and meaning (its table below), read from
/metrics with Prometheus' own text parser while the server queues, runs, generates and loads
and evicts models."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.generator_model import MODEL as GENERATOR
from tests.generator_model import build_generator_repo
from tests.integration.server import RunningServer, start_server
from tests.models import affine_model, slow_model, write_config

PROTOCOL = [
    # the protocol's metric, its type, and inferd's family for it
    ("TotalQueuedRequests", "gauge", "inferd:num_requests_waiting"),
    ("TotalRunningRequests", "gauge", "inferd:num_requests_running"),
    ("KVCacheUtilization", "gauge", "inferd:kv_cache_usage_perc"),
    ("LoRA adapters info", "gauge", "inferd:lora_requests_info"),
]
ADAPTER_LABELS = {"running_lora_adapters", "waiting_lora_adapters", "max_lora"}
ON_DEMAND = {"max_batch_size": 8, "residency": "on_demand", "runtime": {"intra_op_threads": 1}}
WIDTH = 256
T = TypeVar("T")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Three on-demand affine models, a slow model served one row at a time and a generator
    (both pinned); at most four versions in memory."""
    root = tmp_path_factory.mktemp("gateway-repo")
    for name in ("m0", "m1", "m2"):
        affine_model(root / name / "1" / "model.onnx")
        write_config(root / name, ON_DEMAND)
    slow_model(root / "slow" / "1" / "model.onnx", layers=1000, width=WIDTH)  # ~50 ms a row
    write_config(root / "slow", {"max_batch_size": 1})
    build_generator_repo(root)
    log = tmp_path_factory.mktemp("gateway-logs") / "server.log"
    running = start_server(
        root, log, "--max-loaded-versions", "4", "--client-loads-per-minute", "0"
    )
    yield running
    assert running.stop() == 0


def scrape(url: str) -> dict[str, Any]:
    """Each protocol family by name, as Prometheus' parser reads it."""
    text = httpx.get(url + "/metrics", timeout=10).text
    names = {family for _, _, family in PROTOCOL}
    return {f.name: f for f in text_string_to_metric_families(text) if f.name in names}


def value(families: dict[str, Any], name: str) -> float:
    (sample,) = families[name].samples
    return float(sample.value)


def adapters(families: dict[str, Any]) -> tuple[set[str], set[str], int, float]:
    (sample,) = families["inferd:lora_requests_info"].samples
    labels = sample.labels
    assert set(labels) == ADAPTER_LABELS

    def listed(key: str) -> set[str]:
        return {name.strip() for name in labels[key].split(",") if name.strip()}

    return (
        listed("running_lora_adapters"),
        listed("waiting_lora_adapters"),
        int(labels["max_lora"]),
        sample.value,
    )


def affine(url: str, model: str) -> httpx.Response:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1.0] * 4}]}
    return httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=60)


def test_every_family_of_the_protocol_is_there_with_its_type(server: RunningServer) -> None:
    families = scrape(server.url)
    for metric, kind, name in PROTOCOL:
        assert name in families, f"{metric}: no {name}"
        assert families[name].type == kind, metric
    assert value(families, "inferd:num_requests_waiting") == 0
    assert value(families, "inferd:num_requests_running") == 0
    assert value(families, "inferd:kv_cache_usage_perc") == 0
    running, waiting, most, stamp = adapters(families)
    # the pinned models are in memory; the on-demand ones wait for their first request
    assert running == {"slow", GENERATOR} and waiting == set() and most == 4
    assert abs(stamp - time.time()) < 60  # the value is when it was read (the EPP keeps the latest)


def test_the_models_in_memory_are_the_adapters_running(server: RunningServer) -> None:
    for name in ("m0", "m1"):
        assert affine(server.url, name).status_code == 200
    running, _, _, _ = adapters(scrape(server.url))
    assert running == {"slow", GENERATOR, "m0", "m1"}
    assert affine(server.url, "m2").status_code == 200  # over four: m0, the least recent, goes
    running, _, _, _ = adapters(scrape(server.url))
    assert running == {"slow", GENERATOR, "m1", "m2"}


def watched(
    read: Callable[[], T], send: Callable[[int], httpx.Response], count: int
) -> tuple[list[httpx.Response], list[T]]:
    """`count` requests sent at once (`send(i)`), and what `read` read of /metrics again and
    again until they were all answered."""
    readings: list[T] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            readings.append(read())
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(count) as pool:
            answers = list(pool.map(send, range(count)))
    finally:
        done.set()
        watcher.join()
    return answers, readings


def test_queued_requests_wait_and_the_rest_run(server: RunningServer) -> None:
    x = np.full((1, WIDTH), 0.5, dtype=np.float32).tolist()
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, WIDTH], "data": x}]}

    def read() -> tuple[float, float]:
        families = scrape(server.url)
        waiting = value(families, "inferd:num_requests_waiting")
        return waiting, value(families, "inferd:num_requests_running")

    # one client for the 12, connected on first use: a client made per request spends tens of
    # milliseconds of this process's CPU (its TLS context) on each, which on two busy cores can
    # spread the 12 arrivals so far apart that the slow model never has one waiting
    with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=12)) as client:
        answers, seen = watched(
            read,
            lambda _: client.post(f"{server.url}/v2/models/slow/infer", json=body),
            12,
        )
    assert all(a.status_code == 200 for a in answers)
    assert max(w for w, _ in seen) >= 2  # one row at a time: the others wait
    assert max(r for _, r in seen) >= 1
    assert all(w + r <= 12 for w, r in seen)
    after = scrape(server.url)
    assert value(after, "inferd:num_requests_waiting") == 0
    assert value(after, "inferd:num_requests_running") == 0


def test_the_kv_cache_fills_while_generating(server: RunningServer) -> None:
    def generate(i: int) -> httpx.Response:
        body = {
            "model": GENERATOR,
            "prompt": f"Tell a long story {i}",
            "max_length": 200,
            "ignore_eos": True,
        }
        return httpx.post(f"{server.url}/generate", json=body, timeout=120)

    answers, usage = watched(
        lambda: value(scrape(server.url), "inferd:kv_cache_usage_perc"), generate, 4
    )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert 0 < max(usage) <= 1
    assert value(scrape(server.url), "inferd:kv_cache_usage_perc") == 0
