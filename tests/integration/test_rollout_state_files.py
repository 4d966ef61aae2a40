"""Bad rollout state files on a real server: each one is logged with its path in the
repository and the reason, its model's rollout shows failed (the rollout route, `inferd
rollout status`, /ready's per-model detail, the status snapshot, `inferd_rollout_failed`)
while the model serves by its version policy, the server stays ready (every model loaded),
the other models' rollouts resume, and no admin route answers 5xx for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.integration.rollouts import ADMIN, ADMIN_KEY, act, serve, status
from tests.models import lookup_model, write_config

GOOD = {
    "model": "good",
    "stable": 1,
    "candidate": 2,
    "steps": [50, 100],
    "step": 0,
    "status": "running",
    "weight": 0.5,
    "window_started": 0.0,
}
BAD: dict[str, tuple[bytes, str]] = {
    # model -> (the file, a word of the reason logged)
    "types": (
        json.dumps({**GOOD, "model": "types", "stable": "1", "steps": "50"}).encode(),
        "stable",
    ),
    "cut": (json.dumps({**GOOD, "model": "cut"}).encode()[:40], "json"),
    "list": (b"[]", "the file"),
    "huge": (b'{"model": "huge", "reason": "' + b"x" * (2 << 20) + b'"}', "bytes"),
    "status": (json.dumps({**GOOD, "model": "status", "status": "failed"}).encode(), "failed"),
}


CLI = (sys.executable, "-m", "inferd", "rollout")


def body(index: int) -> dict[str, Any]:
    return {"inputs": [{"name": "idx", "datatype": "INT64", "shape": [1, 1], "data": [index]}]}


def test_bad_state_files_fail_their_rollout_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in ("good", *BAD):
        for version in (1, 2):
            lookup_model(root / name / str(version) / "model.onnx", rows=16)
        # the stable version is 1 (a running rollout adds 2 beside it)
        write_config(
            root / name,
            {
                "version_policy": {"specific": [1]},
                "rollout": {"steps": [50, 100], "analysis_window_s": 3600},
            },
        )
    folder = root / ".inferd" / "rollouts"
    folder.mkdir(parents=True)
    (folder / "good.json").write_text(json.dumps(GOOD))
    for name, (data, _) in BAD.items():
        (folder / f"{name}.json").write_bytes(data)
    server = serve(root, tmp_path / "server.log")
    try:
        # logged: the path relative to the repository and why
        lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
        unreadable = {
            line["path"]: line["reason"]
            for line in lines
            if line.get("event") == "rollout state unreadable"
        }
        assert set(unreadable) == {f".inferd/rollouts/{name}.json" for name in BAD}, unreadable
        for name, (_, word) in BAD.items():
            reason = unreadable[f".inferd/rollouts/{name}.json"]
            assert word in reason.lower() and len(reason) <= 500, (name, reason)

        # the good model's rollout resumed: both versions serve, at its step's share
        good = status(server, "good")
        assert (good["status"], good["step"], good["weight"]) == ("running", 0, 0.5)
        seen = set()
        for i in range(40):
            answer = httpx.post(
                f"{server.url}/v2/models/good/infer",
                json=body(1),
                headers={"X-Inferd-Route-Key": f"k{i}"},
            )
            assert answer.status_code == 200, answer.text
            seen.add(answer.json()["model_version"])
        assert seen == {"1", "2"}

        ready = httpx.get(f"{server.url}/ready", timeout=10)
        detail = ready.json()["models"]
        snapshot = httpx.get(f"{server.url}/v1/status", timeout=10)
        assert snapshot.status_code == 200
        shown = {m["name"]: m["rollout"] for m in snapshot.json()["models"]}
        assert shown["good"]["weight"] == 0.5
        for name in BAD:
            path = f".inferd/rollouts/{name}.json"
            # the model serves by its version policy
            answer = httpx.post(f"{server.url}/v2/models/{name}/infer", json=body(1))
            assert answer.status_code == 200 and answer.json()["model_version"] == "1"
            # its rollout shows failed, with the file and the reason, wherever it shows
            state = status(server, name)
            assert state["status"] == "failed" and path in state["reason"], state
            assert detail[name]["rollout"]["status"] == "failed", detail[name]
            assert path in detail[name]["rollout"]["reason"]
            assert shown[name]["status"] == "failed" and path in shown[name]["reason"]
            described = subprocess.run(
                [*CLI, "status", name, "--url", server.url, "--admin-key", ADMIN_KEY],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert described.returncode == 0, described.stderr
            assert "rollout failed" in described.stdout and path in described.stdout
            # no admin route answers 5xx for it
            for action in ("promote", "rollback", "abort"):
                answer = act(server, name, action)
                assert answer.status_code == 404, (name, action, answer.text)
            for path_ in (f"/v2/repository/models/{name}/load", "/v2/repository/index"):
                answer = httpx.post(server.url + path_, headers=ADMIN, timeout=60)
                assert answer.status_code == 200, (path_, answer.text)
        # readiness is every model and version loaded (strict, the default), nothing else: a
        # failed rollout is reported, and replicas sharing the repository stay in rotation
        assert ready.status_code == 200, ready.text
        assert ready.json()["ready"] is True and ready.json()["reason"] == "ready", ready.text
        assert httpx.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200
        assert snapshot.json()["ready"] is True
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
        for name in (*BAD, "good"):
            value = 1 if name in BAD else 0
            assert f'inferd_rollout_failed{{model="{name}"}} {value}.0' in metrics, name

        # a new rollout replaces the bad record: its file is written whole again
        started = act(server, "list", "start", to=2)
        assert started.status_code == 200, started.text
        assert started.json()["status"] == "running"
        assert json.loads((folder / "list.json").read_text())["candidate"] == 2
        assert (
            "rollout" not in httpx.get(f"{server.url}/ready", timeout=10).json()["models"]["list"]
        )
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
        assert 'inferd_rollout_failed{model="list"} 0.0' in metrics
        unloaded = httpx.post(f"{server.url}/v2/repository/models/huge/unload", headers=ADMIN)
        assert unloaded.status_code == 200, unloaded.text
    finally:
        assert server.stop() == 0, server.log()
