"""A local Ray cluster for tests and benchmarks: a head and more nodes on this machine,
reached at 127.0.0.1, started with `ray start` in their own temp dir and stopped by killing
exactly the processes they started (not `ray stop`, which stops every Ray process of the
user). Ray 2.60 takes `--node-ip-address 127.0.0.1` as the machine's outside address for the
nodes' own listeners; a head on loopback proper (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`) leaves
a second node's `ray start` hanging.

Its processes have an environment of their own: a home folder of their own (Ray 2.60 reads
`~/.ray/auth_token`, left by any local cluster the user started, and turns token
authentication on when it finds one), authentication chosen here (off: a cluster for tests
and benchmarks, for the time they run), and a mark that finds them all when it stops, those
of a node that failed to start included."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil

from inferd.bench.launch import free_port
from inferd.rayserve.environment import AUTH_ENV, DIRECT_INGRESS_ENV

MARK = "INFERD_LOCAL_RAY"
"""In the environment of every process of a cluster (its value the cluster's own): how
`stop` finds them, wherever Ray started them."""


def haproxy_env(folder: Path) -> dict[str, str]:
    """Serve's HAProxy with its files in `folder` (a short path: its socket paths are at most
    97 bytes) and its statistics and metrics on free ports, not on fixed ones that another
    cluster of the machine may hold."""
    return {
        "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(folder / "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": str(folder / "admin.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(folder),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(folder / "server-state"),
        "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(folder / "metrics.sock"),
    }


class LocalRay:
    def __init__(
        self, root: Path, nodes: int = 2, cpus_per_node: int = 1, direct_ingress: bool = True
    ) -> None:
        """`direct_ingress`: Serve's direct ingress and HAProxy (inferd ray serve's way);
        else Serve's Python proxy. A node that fails to start stops the others (RuntimeError
        with its output)."""
        self.root = root
        # HAProxy's socket paths are at most 97 bytes (Ray adds a 40-character folder)
        haproxy = Path(tempfile.mkdtemp(prefix="ihp", dir="/tmp"))
        self._haproxy = haproxy
        self.mark = secrets.token_hex(8)
        home = root / "home"
        home.mkdir(parents=True, exist_ok=True)
        self.http_port = free_port()
        self.env = {
            # (the ingress chosen here, not the one a cluster of this process's set, e.g. a
            # test's driver connected to another cluster)
            **{
                name: value
                for name, value in os.environ.items()
                if name not in AUTH_ENV and name not in DIRECT_INGRESS_ENV
            },
            **(DIRECT_INGRESS_ENV if direct_ingress else {}),
            MARK: self.mark,
            "HOME": str(home),
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            # a replica being stopped leaves HAProxy after 2 s rather than the default 30 s
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
            **haproxy_env(haproxy),
        }
        self.gcs_port = free_port()  # ephemeral: outside Ray's worker port range
        self.address = f"127.0.0.1:{self.gcs_port}"
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus_per_node)]
        try:
            self._start(
                "--head",
                "--port",
                str(self.gcs_port),
                "--ray-client-server-port",
                str(free_port()),
                "--include-dashboard",
                "false",
                "--temp-dir",
                str(root / "ray"),
                *common,
            )
            for _ in range(nodes - 1):
                self._start("--address", self.address, *common)
        except BaseException:
            self.stop()
            raise

    def _start(self, *args: str) -> None:
        done = subprocess.run(
            ["ray", "start", *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{done.stdout}{done.stderr}")

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster that runs: each carries its mark. (Read from
        /proc: a Ray process's title overwrites the start of its environment block, where
        psutil stops reading.)"""
        entry = f"{MARK}={self.mark}".encode()
        found = []
        for process in psutil.process_iter():
            try:
                block = Path(f"/proc/{process.pid}/environ").read_bytes()
            except OSError:
                continue
            if entry in block.split(b"\0"):
                found.append(process)
        # and their children: a Ray agent's title may take up its whole environment block
        every = {process.pid: process for process in found}
        for process in found:
            with contextlib.suppress(psutil.NoSuchProcess):
                every.update({child.pid: child for child in process.children(recursive=True)})
        return list(every.values())

    def listening(self) -> set[tuple[str, str, int]]:
        """What its processes listen on (TCP): (process name, address, port) each."""
        found = set()
        for process in self.processes():
            try:
                name = process.name()
                connections = process.net_connections(kind="tcp")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            found |= {
                (name, c.laddr.ip, c.laddr.port)
                for c in connections
                if c.status == psutil.CONN_LISTEN
            }
        return found

    def stop(self) -> None:
        victims = {process.pid: process for process in self.processes()}
        for process in victims.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.terminate()
        _, alive = psutil.wait_procs(list(victims.values()), timeout=10)
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(alive, timeout=10)
        # what started while it stopped (a worker a raylet was starting)
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        shutil.rmtree(self._haproxy, ignore_errors=True)
