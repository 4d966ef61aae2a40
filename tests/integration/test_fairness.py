"""Fairness between clients on a real server: while one client floods a model's queue (a
closed loop that sends again as soon as answered), a client that sends one request at a time
is served ahead of the flood and never refused, over API keys and over peer addresses. (That
the flood is refused for its own queued work: tests/unit/batching/test_fairness.py; that a
client back before its `Retry-After` is paced: tests/integration/test_shedding.py.)"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.server import RunningServer, start_server
from tests.models import slow_model, write_config

WIDTH = 256
FLOOD_KEY = "flood-key-0000000001"
STEADY_KEY = "steady-key-000000001"
BODY = orjson.dumps(
    {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, WIDTH], "data": [0.5] * WIDTH}]}
)
PATH = "/v2/models/slow/infer"
FLOOD_CONNECTIONS = 64


def repository(root: Path) -> Path:
    slow_model(root / "slow" / "1" / "model.onnx", layers=2048, width=WIDTH)
    write_config(
        root / "slow",
        {
            "max_batch_size": 4,
            "runtime": {"intra_op_threads": 1},
            "dynamic_batching": {"max_queue_time_ms": 150},
        },
    )
    return root


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = repository(tmp_path_factory.mktemp("fair-repo"))
    keys = root.parent / "api.keys"
    keys.write_text(f"{FLOOD_KEY} name=flood\n{STEADY_KEY} name=steady\n")
    running = start_server(
        root, tmp_path_factory.mktemp("fair-logs") / "server.log", "--api-keys-file", str(keys)
    )
    yield running
    assert running.stop() == 0, running.log()


def server_ms(answer: httpx.Response) -> float:
    timings = dict(re.findall(r"(\w+);dur=([\d.]+)", answer.headers["server-timing"]))
    return float(timings["total"]) - float(timings.get("hold", 0))


Options = Callable[[], dict[str, Any]]
"""A client's options for `httpx.Client`, made anew for each connection (a transport is not
shared between clients)."""


def flood_and_steady(
    url: str, flood: Options, steady: Options, requests: int = 12
) -> tuple[list[httpx.Response], list[httpx.Response]]:
    """`FLOOD_CONNECTIONS` closed-loop connections with the `flood` client options while
    `requests` requests are sent one at a time, 50 ms apart, with the `steady` client options
    (once the flood's queue stands)."""
    flooded: list[httpx.Response] = []
    lock = threading.Lock()
    done = threading.Event()

    def one_connection() -> None:
        with httpx.Client(base_url=url, timeout=60, **flood()) as http:
            while not done.is_set():
                answer = http.post(PATH, content=BODY)
                with lock:
                    flooded.append(answer)

    threads = [threading.Thread(target=one_connection) for _ in range(FLOOD_CONNECTIONS)]
    for thread in threads:
        thread.start()
    steady_answers = []
    try:
        deadline = time.monotonic() + 30
        while len(flooded) < FLOOD_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.05)  # every flood connection answered once: its queue stands
        with httpx.Client(base_url=url, timeout=60, **steady()) as http:
            for _ in range(requests):
                steady_answers.append(http.post(PATH, content=BODY))
                time.sleep(0.05)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    return flooded, steady_answers


def check(flooded: list[httpx.Response], steady: list[httpx.Response], steady_name: str) -> None:
    assert [a.status_code for a in steady] == [200] * len(steady), [a.text for a in steady]
    statuses = [a.status_code for a in flooded]
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    assert all(a.json()["code"] == 4290 for a in flooded if a.status_code == 429)
    # served ahead of the flood: its time in the server is below the flood's admitted ones
    served = [server_ms(a) for a in flooded if a.status_code == 200]
    assert statistics.median(server_ms(a) for a in steady) < statistics.median(served), (
        steady_name,
        [server_ms(a) for a in steady],
        statistics.median(served),
    )


def test_a_steady_key_is_served_ahead_of_a_flooding_key_and_never_refused(
    keyed: RunningServer,
) -> None:
    flooded, steady = flood_and_steady(
        keyed.url,
        lambda: {"headers": {"authorization": f"Bearer {FLOOD_KEY}"}},
        lambda: {"headers": {"authorization": f"Bearer {STEADY_KEY}"}},
    )
    check(flooded, steady, "steady key")


def test_without_keys_a_steady_address_is_served_ahead_of_a_flooding_one(tmp_path: Path) -> None:
    running = start_server(repository(tmp_path / "repo"), tmp_path / "server.log")
    try:
        flooded, steady = flood_and_steady(
            running.url,
            lambda: {"transport": httpx.HTTPTransport(local_address="127.0.0.2")},
            lambda: {"transport": httpx.HTTPTransport(local_address="127.0.0.3")},
        )
        check(flooded, steady, "steady address")
    finally:
        assert running.stop() == 0, running.log()
