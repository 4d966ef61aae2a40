"""Jobs when Redis fails, against a real redis-server the test kills and starts again (empty,
or with its AOF), and what jobs may hold: the Redis memory many large failing jobs leave, the
bounds on kept answers, and jobs that belong to the key that submitted them."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.server import RunningServer, start_server
from tests.integration.test_jobs import (
    LONG,
    affine_body,
    slow_body,
    submit,
    wait_done,
    wait_state,
)
from tests.models import affine_model, slow_model, write_config
from tests.redis_server import RedisProcess

SLOW_WIDTH = 512
LOST = "the job store lost this job"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jobs-faults-repo")
    affine_model(root / "affine" / "1" / "model.onnx")
    write_config(root / "affine", {"max_batch_size": 8})
    slow_model(root / "slow" / "1" / "model.onnx", layers=8000, width=SLOW_WIDTH)
    write_config(root / "slow", {"max_batch_size": LONG, "runtime": {"intra_op_threads": 1}})
    return root


def serve(repo: Path, folder: Path, redis: RedisProcess, *args: str) -> RunningServer:
    return start_server(
        repo,
        folder / f"server-{time.monotonic_ns()}.log",
        "--jobs-redis-url",
        redis.url,
        *args,
    )


def log_lines(server: RunningServer) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


def assert_no_line_repeats_within_a_second(server: RunningServer) -> None:
    """No warning or error (the lines a fault brings) comes twice in the same second; the
    access log's line of each failed request (`request`, with its own id) is not a repeat."""
    seen = Counter(
        (line["event"], line["ts"][:19])
        for line in log_lines(server)
        if line["level"] in ("warning", "error", "critical") and line["event"] != "request"
    )
    repeated = {key: n for key, n in seen.items() if n > 1}
    assert not repeated, repeated
    assert "Traceback" not in server.log()


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name}")


def test_a_redis_that_comes_back_empty_is_made_again_and_its_jobs_answer_lost(
    repo: Path, tmp_path: Path
) -> None:
    redis = RedisProcess(tmp_path / "redis")
    redis.start()
    server = serve(repo, tmp_path, redis)
    try:
        answered = submit(server.url, "/v2/models/affine/infer", affine_body(1))
        assert wait_done(server.url, answered)["state"] == "succeeded"
        running = submit(server.url, "/v2/models/slow/infer", slow_body(LONG))
        wait_state(server.url, running, "running")
        waiting = submit(server.url, "/v2/models/slow/infer", slow_body(1))
        time.sleep(1.5)  # the worker reads the store's size once a second
        redis.restart_empty()  # no persistence: everything it held is gone

        after = submit(server.url, "/v2/models/affine/infer", affine_body(2))
        job = wait_done(server.url, after, timeout_s=60)  # behind the running one (~3 s)
        assert job["state"] == "succeeded", job
        for lost in (answered, waiting):
            view = httpx.get(f"{server.url}/v1/jobs/{lost}", timeout=10).json()
            assert view["state"] == "failed" and view["reason"] == LOST, view
        # the job running through the loss keeps its answer: the worker writes it on finishing
        kept = wait_done(server.url, running, timeout_s=30)
        assert kept["state"] == "succeeded" and kept["attempts"] == 1, kept
        # an id the server never issued is still unknown
        unknown = httpx.get(f"{server.url}/v1/jobs/{'0' * 43}", timeout=10)
        assert unknown.status_code == 404 and unknown.json()["code"] == 4040
        assert metric(server.url, "inferd_jobs_lost_total") >= 2  # the answered and the waiting
        submitted = time.monotonic()  # with the worker free: at once
        again = submit(server.url, "/v2/models/affine/infer", affine_body(1))
        assert wait_done(server.url, again, timeout_s=10)["state"] == "succeeded"
        assert time.monotonic() - submitted < 3
    finally:
        assert server.stop() == 0, server.log()
        redis.stop()
    empty = [line for line in log_lines(server) if "came back empty" in line["event"]]
    assert len(empty) == 1 and empty[0]["level"] == "warning", empty
    assert empty[0]["jobs_known"] >= 2, empty
    assert "NOGROUP" not in server.log()
    assert_no_line_repeats_within_a_second(server)


def test_redis_down_mid_job_answers_503_and_every_job_ends_once_it_is_back(
    repo: Path, tmp_path: Path
) -> None:
    """AOF on: Redis killed while a job runs and another waits, started again with its data."""
    redis = RedisProcess(tmp_path / "redis", appendonly=True)
    redis.start()
    server = serve(repo, tmp_path, redis)
    try:
        running = submit(server.url, "/v2/models/slow/infer", slow_body(LONG))
        wait_state(server.url, running, "running")
        waiting = submit(server.url, "/v2/models/slow/infer", slow_body(1))
        redis.kill()

        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # a while down: many requests, one log line
            posted = httpx.post(
                f"{server.url}/v1/jobs",
                json={"route": "/v2/models/affine/infer", "body": affine_body(1)},
                timeout=10,
            )
            read = httpx.get(f"{server.url}/v1/jobs/{running}", timeout=10)
            for response in (posted, read):
                assert response.status_code == 503, response.text
                assert response.json()["code"] == 5030
                assert response.json()["error"] == "the job store is unreachable"
                assert int(response.headers["retry-after"]) >= 1
            time.sleep(0.1)
        ready = httpx.get(f"{server.url}/ready", timeout=10)
        assert ready.status_code == 200, ready.text  # inference does not need the job store
        assert ready.json()["jobs"]["reachable"] is False
        assert "unreachable" in ready.json()["jobs"]["reason"]
        inferred = httpx.post(
            f"{server.url}/v2/models/affine/infer", json=affine_body(1), timeout=10
        )
        assert inferred.status_code == 200

        redis.start()  # with its AOF: the jobs are still there
        first = wait_done(server.url, running, timeout_s=90)
        second = wait_done(server.url, waiting, timeout_s=90)
        assert first["state"] == "succeeded" and first["attempts"] == 1, first
        assert second["state"] == "succeeded", second
        assert httpx.get(f"{server.url}/ready", timeout=10).json()["jobs"]["reachable"] is True
        after = submit(server.url, "/v2/models/affine/infer", affine_body(1))
        assert wait_done(server.url, after, timeout_s=30)["state"] == "succeeded"
    finally:
        assert server.stop() == 0, server.log()
        redis.stop()
    down = [line for line in log_lines(server) if "unreachable" in line["event"]]
    assert len(down) == 1 and down[0]["level"] == "warning", down
    assert_no_line_repeats_within_a_second(server)


def big_failing_body(megabytes: float) -> dict[str, Any]:
    values = int(megabytes * 1e6 / 8)  # about 8 characters a value in JSON
    data = np.full(values, 0.125, np.float32).tolist()
    return {"inputs": [{"name": "x", "shape": [values], "datatype": "FP32", "data": data}]}


def test_many_large_failing_jobs_leave_redis_memory_bounded(repo: Path, tmp_path: Path) -> None:
    """Each job's body is dropped when it finishes: Redis holds their small errors only."""
    jobs, megabytes = 60, 2.0
    redis = RedisProcess(tmp_path / "redis")
    redis.start()
    server = serve(repo, tmp_path, redis)
    client = redis.client()
    try:
        before = int(client.info("memory")["used_memory"])
        body = {"route": "/v2/models/absent/infer", "body": big_failing_body(megabytes)}
        ids: list[str] = []
        with httpx.Client(timeout=30) as http:
            while len(ids) < jobs:
                response = http.post(f"{server.url}/v1/jobs", json=body)
                if response.status_code == 429:  # the queue's bytes bound: wait for room
                    time.sleep(0.05)
                    continue
                assert response.status_code == 202, response.text
                ids.append(response.json()["id"])
        for job_id in ids:
            job = wait_done(server.url, job_id)
            assert job["state"] == "failed" and job["error"]["code"] == 4040, job
        after = int(client.info("memory")["used_memory"])
        grown_mb = (after - before) / 1e6
        print(f"\n{jobs} jobs of {megabytes} MB failed: Redis used_memory +{grown_mb:.2f} MB")
        assert grown_mb < 2.0, grown_mb  # against 120 MB of bodies
        key = f"{{inferd-jobs}}:job:{ids[0]}"
        assert not client.hexists(key, "body") and client.hexists(key, "result")
    finally:
        client.close()
        assert server.stop() == 0, server.log()
        redis.stop()


def test_kept_answers_are_bounded_in_count_and_size(repo: Path, tmp_path: Path) -> None:
    redis = RedisProcess(tmp_path / "redis")
    redis.start()
    server = serve(
        repo, tmp_path, redis, "--jobs-max-results", "3", "--jobs-max-result-mb", "0.0002"
    )
    try:
        small = [submit(server.url, "/v2/models/affine/infer", affine_body(1)) for _ in range(2)]
        big = submit(server.url, "/v2/models/affine/infer", affine_body(40))  # ~1 KB answer
        assert all(wait_done(server.url, j)["state"] == "succeeded" for j in small)
        over = wait_done(server.url, big)
        assert over["state"] == "failed" and over["error"]["code"] == 4005, over
        assert "jobs_max_result_mb" in over["reason"]
        refused = httpx.post(
            f"{server.url}/v1/jobs",
            json={"route": "/v2/models/affine/infer", "body": affine_body(1)},
            timeout=10,
        )
        assert refused.status_code == 429 and refused.json()["code"] == 4290, refused.text
        assert "kept job answers" in refused.json()["error"]
        assert int(refused.headers["retry-after"]) > 3600  # once the first answer expires
    finally:
        assert server.stop() == 0, server.log()
        redis.stop()


def post_as(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/jobs",
        json={"route": "/v2/models/affine/infer", "body": affine_body(1)},
        headers=headers,
        timeout=10,
    )


def submit_as(url: str, headers: dict[str, str]) -> str:
    response = post_as(url, headers)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def wait_as(url: str, job_id: str, headers: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        job: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json()
        if job["state"] in ("succeeded", "failed"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def test_a_job_belongs_to_the_key_that_submitted_it(repo: Path, tmp_path: Path) -> None:
    keys = tmp_path / "api.keys"
    keys.write_text("first-key-0123456789\nsecond-key-0123456789\n")
    redis = RedisProcess(tmp_path / "redis")
    redis.start()
    server = serve(
        repo,
        tmp_path,
        redis,
        "--api-keys-file",
        str(keys),
        "--jobs-callback-hosts",
        "127.0.0.1:9",
        "--jobs-max-results",
        "4",
        "--jobs-key-share",
        "0.5",
    )
    first = {"authorization": "Bearer first-key-0123456789"}
    second = {"authorization": "Bearer second-key-0123456789"}
    try:
        job_id = submit_as(server.url, first)
        mine = wait_as(server.url, job_id, first)
        assert mine["state"] == "succeeded"
        other = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers=second, timeout=10)
        assert other.status_code == 404 and other.json()["code"] == 4040
        assert "no job" in other.json()["error"]
        nobody = httpx.get(f"{server.url}/v1/jobs/{job_id}", timeout=10)
        assert nobody.status_code == 401
        # the key is kept as a hash only
        client = redis.client()
        try:
            record = client.hgetall(f"{{inferd-jobs}}:job:{job_id}")
            assert b"first-key-0123456789" not in b"".join([*record.keys(), *record.values()])
            assert len(record[b"owner"]) == 32
        finally:
            client.close()
        # one key holds at most half of the kept answers (2 of 4); the other key still submits
        wait_as(server.url, submit_as(server.url, first), first)
        refused = post_as(server.url, first)
        assert refused.status_code == 429 and refused.json()["code"] == 4290, refused.text
        assert "this API key's kept job answers" in refused.json()["error"]
        theirs = submit_as(server.url, second)
        assert wait_as(server.url, theirs, second)["state"] == "succeeded"
        # a malformed callback URL is a client's error, not the server's
        for url in ("http://127.0.0.1:9 /", "http://127.0.0.1:x/", "http://[::1/", "http:// /"):
            bad = httpx.post(
                f"{server.url}/v1/jobs",
                json={
                    "route": "/v2/models/affine/infer",
                    "body": affine_body(1),
                    "callback_url": url,
                },
                headers=first,
                timeout=10,
            )
            assert bad.status_code == 400 and bad.json()["code"] == 4004, (url, bad.text)
    finally:
        assert server.stop() == 0, server.log()
        redis.stop()
