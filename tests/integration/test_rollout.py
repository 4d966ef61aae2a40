"""Rollouts on a real server, with real models the tests build and load from real clients: a
candidate that fails requests, or is slower, is rolled back within one analysis window; a good
one is promoted through every step; route keys are sticky; a broken candidate never gets a
request; a restart resumes the step; the CLI drives it all through the admin API."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.rollouts import ADMIN, ADMIN_KEY, act, load_until, serve, status
from tests.integration.server import RunningServer, start_server
from tests.models import lookup_model, slow_model, write_config

WINDOW_S = 2.0


def lookup_body(index: int) -> dict[str, Any]:
    return {"inputs": [{"name": "idx", "datatype": "INT64", "shape": [1, 1], "data": [index]}]}


def slow_body() -> dict[str, Any]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 128], "data": [0.5] * 128}]}


def rollout_config(steps: list[float], **more: object) -> dict[str, object]:
    return {"steps": steps, "analysis_window_s": WINDOW_S, "min_requests": 20, **more}


CANDIDATE_ROWS = {"flaky": 4, "good": 16, "sticky": 16, "drifted": 16}
"""Version 1 of each lookup model has 16 rows; "flaky" version 2 has 4, so it fails the
requests for rows 4-15."""


def build(root: Path) -> Path:
    """Version 1 of each model; the candidates are written once the server runs (a new
    version folder is how a release begins)."""
    for name in (*CANDIDATE_ROWS, "broken"):
        lookup_model(root / name / "1" / "model.onnx", rows=16)
        # judged on failures and agreement here; latency has its own test ("slow")
        judged: dict[str, object] = {"max_latency_ratio": 100}
        if name == "drifted":
            judged |= {"shadow_percent": 100, "min_agreement": 0.9}
        if name == "sticky":
            judged |= {"route_key_field": "user"}
        write_config(
            root / name,
            {
                "max_batch_size": 8,
                "dynamic_batching": {"max_consecutive_failures": 100_000},
                "rollout": rollout_config([10, 50, 100], max_error_rate_increase=0.02, **judged),
            },
        )
    slow_model(root / "slow" / "1" / "model.onnx", layers=2000, width=128)
    write_config(
        root / "slow",
        {
            "max_batch_size": 1,
            "runtime": {"intra_op_threads": 1},
            # a longer window: p99 over more requests, less at the mercy of a busy machine
            "rollout": rollout_config(
                [50, 100], min_requests=30, max_latency_ratio=1.5, analysis_window_s=4.0
            ),
        },
    )
    return root


def add_candidates(root: Path) -> None:
    for name, rows in CANDIDATE_ROWS.items():
        lookup_model(root / name / "2" / "model.onnx", rows=rows)
    # "drifted" version 2 answers every request, but rows 8-15 with other values
    lookup_model(root / "drifted" / "2" / "model.onnx", rows=16, offset=1.0, offset_from=8)
    (root / "broken" / "2").mkdir()
    (root / "broken" / "2" / "model.onnx").write_bytes(b"truncated")
    # 10x the work: its p99 clears the stable one's by far more than the ratio (1.5) and the
    # slack (5 ms) even when a busy machine lifts the stable p99 (in CI 3x once did not, and
    # 5x once did not in a slow hour: 30.9 ms against a stable p99 lifted past 20.6)
    slow_model(root / "slow" / "2" / "model.onnx", layers=20000, width=128)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = build(tmp_path_factory.mktemp("rollout-repo"))
    running = serve(root, tmp_path_factory.mktemp("rollout-logs") / "server.log")
    add_candidates(root)
    yield running
    assert running.stop() == 0, running.log()


def test_a_failing_candidate_is_rolled_back_within_one_window(server: RunningServer) -> None:
    started = act(server, "flaky", "start")
    assert started.status_code == 200, started.text
    assert started.json()["weight"] == pytest.approx(0.1)
    # one request in five asks an index version 2 does not hold: 20% of its requests fail
    answers, took = load_until(
        server,
        "flaky",
        lambda i: lookup_body(10 if i % 5 == 0 else i % 4),
        lambda s: s["status"] != "running",
        limit_s=WINDOW_S * 5,
    )
    state = status(server, "flaky")
    assert state["status"] == "rolled_back", state
    assert "error rate" in state["reason"]
    assert took < WINDOW_S + 1.0, took  # within the first step's window
    failed = [a for a in answers if a[0] != 200]
    assert all(version == "" for _, version in failed)
    # what clients saw: at most the canary's share of the requests sent meanwhile
    assert len(failed) <= 0.1 * len(answers), (len(failed), len(answers))
    assert {a[0] for a in failed} <= {400}  # 4004: the model rejected the input
    # after: every request is the stable version's, and version 2 is gone
    for i in range(20):
        answer = httpx.post(f"{server.url}/v2/models/flaky/infer", json=lookup_body(10 + i % 5))
        assert answer.status_code == 200 and answer.json()["model_version"] == "1"
    assert httpx.get(f"{server.url}/v2/models/flaky/versions/2").status_code == 404
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'inferd_rollout_decisions_total{decision="rollback",model="flaky"} 1.0' in metrics
    assert 'route="canary"' in metrics


def test_a_slower_candidate_is_rolled_back_on_p99(server: RunningServer) -> None:
    assert act(server, "slow", "start").status_code == 200
    _, took = load_until(
        server,
        "slow",
        lambda i: slow_body(),
        lambda s: s["status"] != "running",
        limit_s=20,
        clients=1,  # one at a time: each latency is the version's own work, no one else's
    )
    state = status(server, "slow")
    assert state["status"] == "rolled_back", [
        (d["decision"], d["reason"]) for d in state["decisions"]
    ]
    assert "p99 latency" in state["reason"], state["reason"]
    assert took < 4.0 * 3, took  # in the first window, or the second on a busy machine


def test_a_good_candidate_is_promoted_through_every_step(server: RunningServer) -> None:
    assert act(server, "good", "start").status_code == 200
    answers, _ = load_until(
        server,
        "good",
        lambda i: lookup_body(i % 16),
        lambda s: s["status"] == "promoted",
        limit_s=WINDOW_S * 8,
    )
    state = status(server, "good")
    assert state["status"] == "promoted", state["reason"]
    # (a step may hold first when its window saw too few candidate requests: a slow machine)
    decisions = [
        (d["decision"], d["weight"]) for d in state["decisions"] if d["decision"] != "hold"
    ]
    # the last step keeps 5% on the stable version until the promotion (reference_percent)
    assert decisions == [("start", 0.1), ("advance", 0.5), ("advance", 0.95), ("promote", 0.0)]
    assert {a[0] for a in answers} == {200}
    answer = httpx.post(f"{server.url}/v2/models/good/infer", json=lookup_body(3))
    assert answer.json()["model_version"] == "2"
    assert httpx.get(f"{server.url}/v2/models/good/versions/1").status_code == 404


def test_a_candidate_that_answers_otherwise_is_rolled_back_on_agreement(
    server: RunningServer,
) -> None:
    assert act(server, "drifted", "start").status_code == 200
    answers, took = load_until(
        server,
        "drifted",
        lambda i: lookup_body(i % 16),  # half of them ask a row version 2 changed
        lambda s: s["status"] != "running",
        limit_s=WINDOW_S * 5,
    )
    state = status(server, "drifted")
    assert state["status"] == "rolled_back", state["decisions"]
    assert "agreement" in state["reason"] and "shadowed requests" in state["reason"]
    assert took < WINDOW_S + 1.0, took
    assert {a[0] for a in answers} == {200}  # no client saw an error
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'inferd_rollout_shadow_requests_total{model="drifted",outcome="compared"}' in metrics


def test_route_keys_are_sticky_and_a_named_version_wins(server: RunningServer) -> None:
    assert act(server, "sticky", "start").status_code == 200
    with httpx.Client(base_url=server.url, timeout=10) as http:
        seen: dict[str, set[str]] = {}
        for key in range(40):
            for _ in range(5):
                answer = http.post(
                    "/v2/models/sticky/infer",
                    json=lookup_body(1),
                    headers={"X-Inferd-Route-Key": f"user-{key}"},
                )
                seen.setdefault(f"user-{key}", set()).add(answer.json()["model_version"])
        assert all(len(versions) == 1 for versions in seen.values()), seen
        assert {"1", "2"} >= set().union(*seen.values())
        # the field the config names (`user`, in V2 `parameters`) is the same key
        for key, versions in seen.items():
            answer = http.post(
                "/v2/models/sticky/infer", json={**lookup_body(1), "parameters": {"user": key}}
            )
            assert {answer.json()["model_version"]} == versions, key
        wrong = http.post(
            "/v2/models/sticky/infer", json={**lookup_body(1), "parameters": {"user": [1]}}
        )
        assert wrong.status_code == 400 and "route key 'user'" in wrong.json()["error"]
        for version in ("1", "2"):
            answer = http.post(f"/v2/models/sticky/versions/{version}/infer", json=lookup_body(1))
            assert answer.json()["model_version"] == version
    assert act(server, "sticky", "abort").json()["status"] == "aborted"


def test_a_broken_candidate_never_takes_a_request(server: RunningServer) -> None:
    refused = act(server, "broken", "start")
    assert refused.status_code == 503, refused.text
    assert "version 2 did not load" in refused.json()["error"]
    assert status(server, "broken")["status"] == "none"  # never begun
    for i in range(20):
        answer = httpx.post(f"{server.url}/v2/models/broken/infer", json=lookup_body(i % 16))
        assert answer.status_code == 200 and answer.json()["model_version"] == "1"


def rollout_cli(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "inferd", "rollout", *args]
    return subprocess.run(
        [*command, "--url", server.url, "--admin-key", ADMIN_KEY],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_restart_resumes_the_step_and_the_cli_reports_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    lookup_model(root / "m" / "1" / "model.onnx", rows=16)
    write_config(root / "m", {"rollout": {"steps": [30, 100], "analysis_window_s": 3600}})
    first = serve(root, tmp_path / "first.log")
    lookup_model(root / "m" / "2" / "model.onnx", rows=16)
    try:
        none = rollout_cli(first, "status", "m")
        assert none.returncode == 0, none.stderr
        assert none.stdout == "m: no rollout (start one with: inferd rollout start m)\n"
        unknown = rollout_cli(first, "status", "absent")
        assert unknown.returncode == 1 and "unknown model 'absent'" in unknown.stderr
        # a refused key: which key, and where it was read from
        command = [sys.executable, "-m", "inferd", "rollout", "status", "m", "--url", first.url]
        env = {k: v for k, v in os.environ.items() if k != "INFERD_ADMIN_KEY"}
        keyless = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        assert keyless.returncode == 1 and "no admin key was sent" in keyless.stderr
        wrong = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "INFERD_ADMIN_KEY": "not-the-key-9f3a"},
        )
        assert "the key from the INFERD_ADMIN_KEY environment variable, ending in 9f3a" in (
            wrong.stderr
        ), wrong.stderr
        started = rollout_cli(first, "start", "m", "--to", "2")
        assert started.returncode == 0, started.stderr
        assert "m: version 2 beside 1, running at 30%" in started.stdout
        assert started.stdout.count("beside") == 1, started.stdout
        # a reader that leaves at once (`| head`): no traceback
        quiet = subprocess.run(
            [
                "bash",
                "-c",
                f"{sys.executable} -m inferd rollout status m --url {first.url} "
                f"--admin-key {ADMIN_KEY} | true",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "Traceback" not in quiet.stderr and "BrokenPipe" not in quiet.stderr
    finally:
        assert first.stop() == 0, first.log()
    assert (root / ".inferd" / "rollouts" / "m.json").is_file()
    second = serve(root, tmp_path / "second.log")
    try:
        state = status(second, "m")
        assert (state["status"], state["step"], state["weight"]) == ("running", 0, 0.3)
        versions = {
            httpx.post(
                f"{second.url}/v2/models/m/infer",
                json=lookup_body(1),
                headers={"X-Inferd-Route-Key": f"k{i}"},
            ).json()["model_version"]
            for i in range(60)
        }
        assert versions == {"1", "2"}
        shown = rollout_cli(second, "status", "m")
        assert shown.returncode == 0 and "running at 30%" in shown.stdout, shown
        rolled = rollout_cli(second, "rollback", "m")
        assert rolled.returncode == 0, rolled
        assert rolled.stdout.startswith(
            "m: rollout of version 2 rolled back: version 1 serves all traffic"
        ), rolled.stdout
        assert "- rollback" in rolled.stdout and "{" not in rolled.stdout
    finally:
        assert second.stop() == 0, second.log()
    # a rolled-back version stays out, restart or not, though it is the newest folder
    third = serve(root, tmp_path / "third.log")
    try:
        for _ in range(10):
            answer = httpx.post(f"{third.url}/v2/models/m/infer", json=lookup_body(1))
            assert answer.json()["model_version"] == "1"
    finally:
        assert third.stop() == 0, third.log()


def test_a_new_version_folder_starts_a_rollout_by_itself(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in ("auto", "autobroken"):
        lookup_model(root / name / "1" / "model.onnx", rows=16)
        write_config(
            root / name,
            {"rollout": {"auto": True, "steps": [50, 100], "analysis_window_s": 3600}},
        )
    keys = tmp_path / "admin.keys"
    keys.write_text(ADMIN_KEY + "\n")
    log = tmp_path / "server.log"
    running = start_server(root, log, "--admin-keys-file", str(keys), "--repository-poll-s", "0.2")
    try:
        lookup_model(root / "auto" / "2" / "model.onnx", rows=16)
        (root / "autobroken" / "2").mkdir()
        (root / "autobroken" / "2" / "model.onnx").write_bytes(b"truncated")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            answer = httpx.get(
                f"{running.url}/v2/repository/models/auto/rollout", headers=ADMIN, timeout=10
            )
            if answer.status_code == 200 and answer.json()["status"] != "none":
                break
            time.sleep(0.2)
        state = status(running, "auto")
        assert (state["stable"], state["candidate"], state["status"]) == (1, 2, "running")
        time.sleep(1.0)  # several more polls: the broken one is tried once, never served
        assert status(running, "autobroken")["status"] == "none"
        for i in range(10):
            answer = httpx.post(f"{running.url}/v2/models/autobroken/infer", json=lookup_body(i))
            assert answer.json()["model_version"] == "1"
        assert running.log().count("automatic rollout not started") == 1
    finally:
        assert running.stop() == 0, running.log()
