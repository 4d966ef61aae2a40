"""Deadlines, shedding, disconnects and drain against a model slow enough to queue behind."""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from tests.integration.server import RunningServer, start_server
from tests.models import slow_model, write_config

WIDTH = 512
LAYERS = 2048  # about 30 ms a request on one thread


def body(value: float = 0.5) -> dict[str, Any]:
    x = np.full((1, WIDTH), value, dtype=np.float32)
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, WIDTH], "data": x.tolist()}]}


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow-repo")
    slow_model(root / "slow" / "1" / "model.onnx", layers=LAYERS, width=WIDTH)
    write_config(
        root / "slow",
        {
            "max_batch_size": 1,
            "runtime": {"intra_op_threads": 1},
            # a deep queue held as long as it takes: what drains and deadlines act on
            "dynamic_batching": {"max_queue_size": 64, "max_queue_time_ms": None},
        },
    )
    return root


@pytest.fixture(scope="module")
def slow_server(
    slow_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("slow-logs") / "server.log"
    running = start_server(slow_repo, log)
    yield running
    assert running.stop() == 0, running.log()


def post_many(url: str, count: int, headers: dict[str, str] | None = None) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count)
    with (
        httpx.Client(base_url=url, timeout=60, limits=limits) as client,
        ThreadPoolExecutor(count) as pool,
    ):
        futures = [
            pool.submit(client.post, "/v2/models/slow/infer", json=body(), headers=headers)
            for _ in range(count)
        ]
        return [f.result() for f in futures]


def test_requests_expiring_in_the_queue_get_504_code_5040(slow_server: RunningServer) -> None:
    """A request whose deadline passes in the queue gets 504 (5040); one the queue's learned
    wait already shows cannot make it is refused at once, 429 (4290), instead of queueing
    (which of the two a request meets depends on when the model's speed was learned)."""
    responses = post_many(slow_server.url, 12, headers={"X-Request-Timeout-Ms": "60"})
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 429, 504}, statuses
    expired = [r for r in responses if r.status_code == 504]
    refused = [r for r in responses if r.status_code == 429]
    assert expired, statuses
    assert len(expired) + len(refused) >= 6  # 12 x 30 ms cannot fit in 60 ms
    assert all(r.json()["code"] == 5040 for r in expired)
    assert all(r.json()["code"] == 4290 and "deadline" in r.json()["error"] for r in refused)


def outcomes(server: RunningServer) -> dict[str, float]:
    """`inferd_request_outcomes_total` of the slow model's V2 route, by outcome."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    found = re.findall(
        r'^inferd_request_outcomes_total\{endpoint="/v2/models/\{model\}/infer",model="slow",'
        r'outcome="(\w+)"\} (\S+)$',
        text,
        re.M,
    )
    return {outcome: float(value) for outcome, value in found}


def request_lines(server: RunningServer, ids: set[str]) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("request_id") in ids]


def test_a_deadline_the_client_set_is_its_outcome_and_the_servers_own_a_server_error(
    slow_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A client's own deadline that passes (1 ms, for a run of 30 ms) is still answered 504
    (5040), but counted and logged as the client's: outcome `client_deadline` at info level,
    not a server error (which every 5xx alert counts). The server's own `request_timeout_s`
    passing stays a server error, logged at error level. Each on a fresh server: there the
    first request is admitted (no run measured yet says its deadline cannot be met; later,
    the queue's estimate refuses it 429 before it waits) and its deadline passes as it runs."""
    log = tmp_path_factory.mktemp("client-deadline-logs") / "server.log"
    fresh = start_server(slow_repo, log)
    try:
        answer = httpx.post(
            fresh.url + "/v2/models/slow/infer",
            json=body(),
            headers={"X-Request-Timeout-Ms": "1", "X-Request-ID": "client-deadline"},
            timeout=30,
        )
        assert answer.status_code == 504 and answer.json()["code"] == 5040, answer.text
        gained = outcomes(fresh)
        assert gained.get("client_deadline") == 1 and not gained.get("server_error"), gained
        time.sleep(0.2)  # (the log is written as the answers go)
        [line] = request_lines(fresh, {"client-deadline"})
        assert (line["level"], line["outcome"], line["status"]) == ("info", "client_deadline", 504)
    finally:
        assert fresh.stop() == 0, fresh.log()

    log = tmp_path_factory.mktemp("server-deadline-logs") / "server.log"
    server = start_server(slow_repo, log, "--request-timeout-s", "0.001")
    try:
        answer = httpx.post(
            server.url + "/v2/models/slow/infer",
            json=body(),
            headers={"X-Request-ID": "server-deadline"},
            timeout=30,
        )
        assert answer.status_code == 504 and answer.json()["code"] == 5040, answer.text
        assert outcomes(server).get("server_error") == 1
        time.sleep(0.2)
        [line] = request_lines(server, {"server-deadline"})
        assert (line["level"], line["outcome"]) == ("error", "server_error"), line
    finally:
        assert server.stop() == 0, server.log()


def test_full_queue_sheds_with_429_and_retry_after(
    slow_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    write_config(
        slow_repo / "slow",
        {
            "max_batch_size": 1,
            "runtime": {"intra_op_threads": 1},
            "dynamic_batching": {"max_queue_size": 4},
        },
    )
    log = tmp_path_factory.mktemp("shed-logs") / "server.log"
    server = start_server(slow_repo, log)
    try:
        responses = post_many(server.url, 32)  # 8x more clients than the queue holds
    finally:
        assert server.stop() == 0, server.log()
    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) == {200, 429}, statuses  # every request answered, none lost
    shed = [r for r in responses if r.status_code == 429]
    assert all(r.json()["code"] == 4290 and int(r.headers["retry-after"]) >= 1 for r in shed)
    # the queue's 4, at least: requests read and unanswered (the running one included) count
    # against the queue's bound when refusing from the head (inferd.server.shed)
    assert statuses.count(200) >= 4


def test_disconnected_clients_take_their_queued_work_with_them(slow_server: RunningServer) -> None:
    def impatient() -> None:
        # the client gives up after 50 ms and closes its connection
        with contextlib.suppress(httpx.TimeoutException):
            httpx.post(slow_server.url + "/v2/models/slow/infer", json=body(), timeout=0.05)

    with ThreadPoolExecutor(40) as pool:
        list(pool.map(lambda _: impatient(), range(40)))
    # 40 queued requests x 30 ms would be 1.2 s of compute if they stayed in the queue
    time.sleep(0.1)
    started = time.monotonic()
    response = httpx.post(slow_server.url + "/v2/models/slow/infer", json=body(), timeout=30)
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert elapsed < 0.6, f"a fresh request waited {elapsed:.2f} s behind abandoned work"


def test_sigterm_drains_in_flight_requests_then_exits_0(
    slow_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    write_config(
        slow_repo / "slow",
        {
            "max_batch_size": 1,
            "runtime": {"intra_op_threads": 1},
            "dynamic_batching": {"max_queue_size": 128, "max_queue_time_ms": None},
        },
    )
    log = tmp_path_factory.mktemp("drain-logs") / "server.log"
    server = start_server(slow_repo, log, "--drain-grace-s", "0.3", "--drain-timeout-s", "20")
    limits = httpx.Limits(max_connections=50)
    client = httpx.Client(base_url=server.url, timeout=60, limits=limits)
    pool = ThreadPoolExecutor(50)
    futures = [pool.submit(client.post, "/v2/models/slow/infer", json=body()) for _ in range(50)]
    deadline = time.monotonic() + 10
    while True:  # every request admitted: in flight on the server or already answered
        in_flight = httpx.get(server.url + "/ready", timeout=2).json()["in_flight"]
        if in_flight + sum(f.done() for f in futures) >= 50:
            break
        assert time.monotonic() < deadline, "the 50 requests never got in flight"
        time.sleep(0.005)
    assert in_flight >= 30  # most of them are still queued or running at the signal

    server.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    time.sleep(0.05)
    assert httpx.get(server.url + "/ready", timeout=2).status_code == 503  # at once
    assert httpx.get(server.url + "/health", timeout=2).status_code == 200  # still live
    time.sleep(0.4)  # past the grace delay: new inference is refused
    late = httpx.post(server.url + "/v2/models/slow/infer", json=body(), timeout=10)
    assert late.status_code == 503 and late.json()["code"] == 5030
    assert "retry-after" in late.headers

    results = [f.result(timeout=30) for f in futures]
    pool.shutdown()
    client.close()
    assert [r.status_code for r in results] == [200] * 50
    code = server.process.wait(25)
    assert code == 0, server.log()
    assert time.monotonic() - signalled < 20


def _flood(server: RunningServer, count: int) -> tuple[ThreadPoolExecutor, list[Any]]:
    """`count` slow requests in flight (queued or running) on the server."""
    client = httpx.Client(
        base_url=server.url, timeout=60, limits=httpx.Limits(max_connections=count)
    )
    pool = ThreadPoolExecutor(count)
    futures = [pool.submit(client.post, "/v2/models/slow/infer", json=body()) for _ in range(count)]
    deadline = time.monotonic() + 10
    while httpx.get(server.url + "/ready", timeout=2).json()["in_flight"] < count // 2:
        assert time.monotonic() < deadline, "the requests never got in flight"
        time.sleep(0.005)
    return pool, futures


def _answers(futures: list[Any]) -> list[tuple[int, int]]:
    """(status, code) of every answer; a request cut off without one fails the test."""
    out = []
    for future in futures:
        response = future.result(timeout=30)
        code = response.json().get("code", 0) if response.status_code != 200 else 0
        out.append((response.status_code, code))
    return out


def test_a_drain_past_its_timeout_answers_the_rest_5030_in_time(
    slow_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    log = tmp_path_factory.mktemp("drain-timeout-logs") / "server.log"
    server = start_server(slow_repo, log, "--drain-timeout-s", "1")
    pool, futures = _flood(server, 60)  # seconds of work queued (within the 64 it holds)
    server.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = server.process.wait(15)
    elapsed = time.monotonic() - signalled
    answers = _answers(futures)
    pool.shutdown()
    assert code == 0, server.log()
    assert elapsed < 1 + 1 + 1.5, f"shutdown took {elapsed:.1f} s"  # timeout + margin + close
    assert set(answers) <= {(200, 0), (503, 5030)}, set(answers)
    assert (200, 0) in answers and (503, 5030) in answers


def test_a_second_signal_forces_the_exit_and_answers_5030(
    slow_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    log = tmp_path_factory.mktemp("forced-logs") / "server.log"
    server = start_server(slow_repo, log, "--drain-timeout-s", "30")
    pool, futures = _flood(server, 60)  # within the 64 its queue holds: none refused 429
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    server.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = server.process.wait(15)
    elapsed = time.monotonic() - signalled
    answers = _answers(futures)
    pool.shutdown()
    assert code == 1, server.log()
    assert elapsed < 2.0, f"the forced exit took {elapsed:.1f} s"
    assert set(answers) <= {(200, 0), (503, 5030)}, set(answers)
    assert (503, 5030) in answers
    assert "forced exit" in server.log()
    # the drain's line counts the requests the forced exit answered 5030
    drained = [orjson.loads(line) for line in server.log().splitlines() if "drain finished" in line]
    assert len(drained) == 1 and drained[0]["forced"] is True, drained
    assert drained[0]["answered_5030"] == answers.count((503, 5030)), drained
