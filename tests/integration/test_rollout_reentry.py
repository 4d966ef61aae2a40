"""A rolled-back version stays out of traffic on a real server, whatever path could bring it
back: the admin's unload and load (and a load alone), `inferd repo check`, the repository
watcher (the withdrawn folder is still the newest; then a newer one appears), a restart; and
only a new rollout that names it brings it back."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import tritonclient.grpc as grpcclient

from tests.integration.rollouts import ADMIN, ADMIN_KEY, act
from tests.integration.server import RunningServer, start_server
from tests.models import lookup_model, write_config

POLL_S = 0.2


def body(index: int) -> dict[str, Any]:
    return {"inputs": [{"name": "idx", "datatype": "INT64", "shape": [1, 1], "data": [index]}]}


def versions_served(server: RunningServer, requests: int = 40) -> set[str]:
    """The versions that answer requests naming none (each with its own route key, so a
    running rollout's share shows)."""
    seen = set()
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for i in range(requests):
            answer = http.post(
                "/v2/models/m/infer", json=body(i % 16), headers={"X-Inferd-Route-Key": f"k{i}"}
            )
            assert answer.status_code == 200, answer.text
            seen.add(answer.json()["model_version"])
    return seen


def index_versions(server: RunningServer, withdrawn: bool = False) -> set[str]:
    """The versions of `m` the repository index shows in memory (`withdrawn`: those it lists
    as withdrawn by a rollout, UNAVAILABLE, as Triton lists what it does not serve)."""
    answer = httpx.post(f"{server.url}/v2/repository/index", headers=ADMIN, timeout=10)
    assert answer.status_code == 200, answer.text
    rows = [e for e in answer.json() if e["name"] == "m" and "version" in e]
    gone = {e["version"] for e in rows if e.get("reason", "").startswith("withdrawn")}
    for e in rows:
        assert (e["version"] in gone) == (e["state"] == "UNAVAILABLE"), e
    return gone if withdrawn else {e["version"] for e in rows} - gone


def wait_for(check: Callable[[], bool], limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(POLL_S)


def rollout_of(server: RunningServer) -> dict[str, Any] | None:
    answer = httpx.get(f"{server.url}/v2/repository/models/m/rollout", headers=ADMIN, timeout=10)
    assert answer.status_code in (200, 404), answer.text
    return dict(answer.json()) if answer.status_code == 200 else None


def serve(root: Path, log: Path) -> RunningServer:
    keys = log.parent / "admin.keys"
    keys.write_text(ADMIN_KEY + "\n")
    return start_server(
        root, log, "--admin-keys-file", str(keys), "--repository-poll-s", str(POLL_S)
    )


def repo_check(root: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "inferd", "repo", "check", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_rolled_back_version_stays_out_until_a_new_rollout_names_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    lookup_model(root / "m" / "1" / "model.onnx", rows=16)
    # new folders start rollouts by themselves; the window is long: the admin decides here
    write_config(
        root / "m", {"rollout": {"auto": True, "steps": [50, 100], "analysis_window_s": 3600}}
    )
    first = serve(root, tmp_path / "first.log")
    try:
        # version 2 arrives, rolls out by itself, and the admin promotes it
        lookup_model(root / "m" / "2" / "model.onnx", rows=16)
        wait_for(lambda: (rollout_of(first) or {}).get("candidate") == 2, 20, "no rollout of 2")
        assert act(first, "m", "promote").json()["status"] == "promoted"
        assert versions_served(first) == {"2"}
        # version 3 arrives, rolls out by itself beside 2, and the admin rolls it back
        lookup_model(root / "m" / "3" / "model.onnx", rows=16)
        wait_for(lambda: (rollout_of(first) or {}).get("candidate") == 3, 20, "no rollout of 3")
        assert versions_served(first) == {"2", "3"}
        rolled = act(first, "m", "rollback").json()
        assert (rolled["status"], rolled["withdrawn"]) == ("rolled_back", [3])
        assert versions_served(first) == {"2"}

        # the watcher: 3 is still the newest folder, and is never started again by itself
        time.sleep(10 * POLL_S)
        assert rollout_of(first)["status"] == "rolled_back"  # type: ignore[index]
        assert first.log().count("new version folder: starting a rollout") == 2

        # the admin's unload + load (the reported path), and a load alone
        unloaded = httpx.post(f"{first.url}/v2/repository/models/m/unload", headers=ADMIN)
        assert unloaded.status_code == 200, unloaded.text
        loaded = httpx.post(f"{first.url}/v2/repository/models/m/load", headers=ADMIN, timeout=60)
        assert loaded.status_code == 200 and loaded.json()["version"] == "2", loaded.text
        assert versions_served(first) == {"2"} and index_versions(first) == {"2"}
        assert index_versions(first, withdrawn=True) == {"3"}
        reloaded = httpx.post(f"{first.url}/v2/repository/models/m/load", headers=ADMIN, timeout=60)
        assert reloaded.status_code == 200 and reloaded.json()["version"] == "2", reloaded.text
        assert versions_served(first) == {"2"} and index_versions(first) == {"2"}
        assert httpx.get(f"{first.url}/v2/models/m/versions/3").status_code == 404
        # the same through gRPC's repository calls (a stock client)
        assert first.grpc_target is not None
        grpc = grpcclient.InferenceServerClient(first.grpc_target)
        try:
            grpc.unload_model("m", headers={"authorization": f"Bearer {ADMIN_KEY}"})
            grpc.load_model("m", headers={"authorization": f"Bearer {ADMIN_KEY}"})
        finally:
            grpc.close()
        assert versions_served(first) == {"2"} and index_versions(first) == {"2"}
        assert rollout_of(first)["status"] == "rolled_back"  # type: ignore[index]

        # `inferd repo check` names what the server serves, and the withdrawn version
        checked = repo_check(root)
        assert "version 2: OK" in checked and "version 3: OK" not in checked, checked
        assert "version 3: WITHDRAWN" in checked, checked

        # a newer folder: the watcher starts it (not 3) beside 2; the admin aborts it
        shutil.copytree(root / "m" / "2", root / "m" / "4")
        wait_for(lambda: (rollout_of(first) or {}).get("candidate") == 4, 20, "no rollout of 4")
        state = rollout_of(first)
        assert state is not None and (state["stable"], state["status"]) == (2, "running")
        assert versions_served(first) == {"2", "4"}
        aborted = act(first, "m", "abort").json()
        assert (aborted["status"], aborted["withdrawn"]) == ("aborted", [3, 4])
        assert versions_served(first) == {"2"}
    finally:
        assert first.stop() == 0, first.log()

    # a restart serves 2: 3 and 4 are withdrawn though they are the newest folders
    second = serve(root, tmp_path / "second.log")
    try:
        assert versions_served(second) == {"2"} and index_versions(second) == {"2"}
        assert index_versions(second, withdrawn=True) == {"3", "4"}
        time.sleep(10 * POLL_S)  # and the watcher starts neither
        state = rollout_of(second)
        assert state is not None and (state["candidate"], state["status"]) == (4, "aborted")
        # only a new rollout that names it brings 3 back: beside 2, then promoted
        started = act(second, "m", "start", to=3)
        assert started.status_code == 200, started.text
        assert (started.json()["stable"], started.json()["candidate"]) == (2, 3)
        assert started.json()["withdrawn"] == [4]
        assert versions_served(second) == {"2", "3"}
        assert act(second, "m", "promote").json()["status"] == "promoted"
        assert versions_served(second) == {"3"}
        httpx.post(f"{second.url}/v2/repository/models/m/unload", headers=ADMIN).raise_for_status()
        loaded = httpx.post(f"{second.url}/v2/repository/models/m/load", headers=ADMIN, timeout=60)
        assert loaded.status_code == 200 and loaded.json()["version"] == "3", loaded.text
        assert versions_served(second) == {"3"}
    finally:
        assert second.stop() == 0, second.log()
    checked = repo_check(root)
    assert "version 3: OK" in checked and "version 4: WITHDRAWN" in checked, checked
    assert "version 2: OK" not in checked and "version 4: OK" not in checked, checked
