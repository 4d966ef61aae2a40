"""What the rollout tests share: the admin key, the admin's actions, and closed-loop load
until a rollout reaches a state."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.integration.server import RunningServer, start_server

ADMIN_KEY = "rollout-test-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def serve(root: Path, log: Path) -> RunningServer:
    keys = log.parent / "admin.keys"
    keys.write_text(ADMIN_KEY + "\n")
    return start_server(root, log, "--admin-keys-file", str(keys))


def act(server: RunningServer, model: str, action: str, **more: object) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v2/repository/models/{model}/rollout",
        json={"action": action, **more},
        headers=ADMIN,
        timeout=60,
    )


def status(server: RunningServer, model: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{server.url}/v2/repository/models/{model}/rollout", headers=ADMIN, timeout=10
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def load_until(
    server: RunningServer,
    model: str,
    body: Callable[[int], dict[str, Any]],
    done: Callable[[dict[str, Any]], bool],
    limit_s: float,
    clients: int = 4,
    path: str | None = None,
) -> tuple[list[tuple[int, str]], float]:
    """Closed-loop clients sending `body(i)` to `path` (default: the model's V2 infer) until
    `done(status)`: (HTTP status, version) per answer, and when `done` was first seen
    (seconds after the load began)."""
    path = path or f"/v2/models/{model}/infer"
    answers: list[tuple[int, str]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(offset: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            i = offset
            while not stop.is_set():
                answer = http.post(path, json=body(i))
                version = ""
                if answer.is_success:
                    fields = answer.json()
                    version = str(fields.get("model_version", fields.get("version", "")))
                with lock:
                    answers.append((answer.status_code, version))
                i += clients

    started = time.monotonic()
    ended = limit_s
    with ThreadPoolExecutor(clients) as pool:
        for n in range(clients):
            pool.submit(client, n)
        while time.monotonic() - started < limit_s:
            if done(status(server, model)):
                ended = time.monotonic() - started
                break
            time.sleep(0.1)
        stop.set()
    return answers, ended
