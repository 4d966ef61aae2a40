"""A local Ray cluster for tests and benchmarks: a head and more nodes on this machine, on
loopback, started with `ray start` in their own temp dir and stopped by killing exactly the
processes they started (not `ray stop`, which stops every Ray process of the user)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from inferd.bench.server import free_port
from inferd.cli.ray_serve import DIRECT_INGRESS_ENV


class LocalRay:
    def __init__(
        self, root: Path, nodes: int = 2, cpus_per_node: int = 1, direct_ingress: bool = True
    ) -> None:
        """`direct_ingress`: Serve's direct ingress and HAProxy (inferd ray serve's way);
        else Serve's Python proxy."""
        self.root = root
        # HAProxy's socket paths are at most 97 bytes (Ray adds a 40-character folder)
        haproxy = Path(tempfile.mkdtemp(prefix="ihp", dir="/tmp"))
        self._haproxy = haproxy
        self.http_port = free_port()
        self.env = {
            **os.environ,
            **(DIRECT_INGRESS_ENV if direct_ingress else {}),
            "RAY_USAGE_STATS_ENABLED": "0",
            # a replica being stopped leaves HAProxy after 2 s rather than the default 30 s
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
            "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
            "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(haproxy / "haproxy.cfg"),
            "RAY_SERVE_HAPROXY_SOCKET_PATH": str(haproxy / "admin.sock"),
            "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(haproxy),
            "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(haproxy / "server-state"),
            "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(haproxy / "metrics.sock"),
        }
        self.gcs_port = free_port()  # ephemeral: outside Ray's worker port range
        self.address = f"127.0.0.1:{self.gcs_port}"
        self._roots: list[int] = []
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus_per_node)]
        self._start(
            "--head",
            "--port",
            str(self.gcs_port),
            "--include-dashboard",
            "false",
            "--temp-dir",
            str(root / "ray"),
            *common,
        )
        for _ in range(nodes - 1):
            self._start("--address", self.address, *common)

    def _start(self, *args: str) -> None:
        before = {p.pid for p in psutil.process_iter()}
        done = subprocess.run(
            ["ray", "start", *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # what this start left running: the node's daemons (and, later, their children)
        self._roots += [p.pid for p in psutil.process_iter() if p.pid not in before]

    def _processes(self) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for pid in self._roots:
            try:
                process = psutil.Process(pid)
                found[pid] = process
                for child in process.children(recursive=True):
                    found[child.pid] = child
            except psutil.NoSuchProcess:
                continue
        return list(found.values())

    def stop(self) -> None:
        victims = {process.pid: process for process in self._processes()}
        for process in victims.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.terminate()
        _, alive = psutil.wait_procs(list(victims.values()), timeout=10)
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        deadline = time.monotonic() + 10
        while any(p.is_running() for p in alive) and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self._haproxy, ignore_errors=True)
