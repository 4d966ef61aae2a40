"""Starting a real `inferd serve` process on 127.0.0.1 and waiting on its probes: what `inferd
bench` does when given a repository instead of a URL, and what the tests and benchmarks use."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: all held at once while they are chosen (one after another,
    a port just closed may be handed out again)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    grpc_target: str | None = None
    """host:port of its gRPC service (None: started without)."""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(5)


def start_server(
    repo: Path | None,
    log_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    wait_loaded: bool = True,
    entry: Sequence[str] = (sys.executable, "-m", "inferd"),
) -> RunningServer:
    """`entry serve --repo REPO ARGS` on 127.0.0.1, on free ports; returns once it is live
    (and its models loaded, with `wait_loaded`)."""
    port, grpc_port = free_ports(2)
    command = [*entry, "serve", "--host", "127.0.0.1", "--port", str(port)]
    if repo is not None:
        command += ["--repo", str(repo)]
    grpc_target = None
    if "--grpc-port" not in args:  # each server its own free port (the default is 8001)
        command += ["--grpc-port", str(grpc_port)]
        grpc_target = f"127.0.0.1:{grpc_port}"
    command += list(args)
    with log_path.open("wb") as log_file:  # the child keeps its own handle
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    server = RunningServer(f"http://127.0.0.1:{port}", process, log_path, grpc_target)
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"inferd exited with {process.returncode}:\n{server.log()}")
        try:
            response = httpx.get(server.url + "/health", timeout=1)
            if response.status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"inferd did not become live:\n{server.log()}")
        time.sleep(0.05)
    if wait_loaded:
        wait_loaded_models(server)
    return server


def wait_loaded_models(server: RunningServer, timeout_s: float = 60) -> dict[str, object]:
    """Waits until loading has finished (ready or not) and returns the /ready body."""
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, object] = httpx.get(server.url + "/ready", timeout=2).json()
        if body["reason"] != "loading models":
            return body
        if time.monotonic() > deadline:
            raise RuntimeError(f"models did not load:\n{server.log()}")
        time.sleep(0.05)
