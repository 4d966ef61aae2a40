"""Debian's `dockerd` (docker.io), started for a test as root with its data, state, pidfile and
socket in a folder of its own, and stopped after, with what it changed on the host undone: the
`docker0` link, its iptables rules and chains, the FORWARD policy, `net.ipv4.ip_forward`, the
network namespaces it mounted under /run/docker. The undoing runs also when the test fails.

`base_image` builds the stand-in for `python:3.11-slim` (no image registry is reachable) as
`scripts/build-image.sh` does (inferd.tools.base_image): a Debian bookworm root filesystem
from the Debian archive (mmdebstrap, cached between runs), imported, with the host's CA bundle.

    python -m tests.docker_engine    # an engine for a shell: prints DOCKER_HOST, Ctrl-C stops it
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from inferd.tools.base_image import import_base

SYSCTLS = (
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv6/conf/all/forwarding",
    "/proc/sys/net/bridge/bridge-nf-call-iptables",
    "/proc/sys/net/bridge/bridge-nf-call-ip6tables",
)
TABLES = ("filter", "nat", "mangle", "raw")
ENGINE_LINKS = ("docker0", "br-", "veth")
"""Links dockerd makes: its default bridge, user-defined networks' bridges, containers' veths."""
ENGINE_PATHS = ("/run/docker", "/run/containerd", "/run/mount", "/etc/docker/key.json")
"""What dockerd, containerd (its shims' sockets) and umount write outside the engine's folder."""


def _run(*command: str, timeout: float = 60, check: bool = True) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


# -- the host's networking, before and after ------------------------------------------------


@dataclass
class HostState:
    """What dockerd may change on the host, as it was."""

    sysctls: dict[str, str]
    links: set[str]
    rules: dict[str, list[str]]
    """`iptables -t TABLE -S` of each table."""
    mounts: list[str]
    paths: set[str]
    """Those of ENGINE_PATHS that exist."""


def _links() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}


def _mounts() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # \040 for a space
        points.append(point)
    return points


def _rules() -> dict[str, list[str]]:
    return {table: _run("iptables", "-w", "-t", table, "-S").splitlines() for table in TABLES}


def host_state() -> HostState:
    return HostState(
        sysctls={p: Path(p).read_text().strip() for p in SYSCTLS if Path(p).exists()},
        links=_links(),
        rules=_rules(),
        mounts=_mounts(),
        paths={p for p in ENGINE_PATHS if Path(p).exists()},
    )


def restore_host(before: HostState, folders: list[Path]) -> list[str]:
    """Undoes what dockerd left (it must have exited): mounts under its folders and
    /run/docker, the links it made, the iptables rules and chains it added, the policies and
    sysctls it changed. Returns what it undid; raises if the host still differs after (each
    step is tried even when one before it failed)."""
    undone: list[str] = []
    roots = [str(f) for f in folders] + ["/run/docker"]
    extra = [m for m in _mounts() if m not in before.mounts]
    for point in sorted(extra, key=len, reverse=True):  # the deepest first
        if any(point == r or point.startswith(r + "/") for r in roots):
            _run("umount", "--lazy", point, check=False)
            undone.append(f"umount {point}")
    for path in ENGINE_PATHS:
        if path not in before.paths and Path(path).exists():
            if Path(path).is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                Path(path).unlink()
            undone.append(f"rm -r {path}")
    for link in sorted(_links() - before.links):
        if link.startswith(ENGINE_LINKS):
            _run("ip", "link", "delete", link, check=False)
            undone.append(f"ip link delete {link}")
    after = _rules()
    for table in TABLES:
        old, new = before.rules[table], after[table]
        # the rules first (a chain is deleted only when nothing jumps to it), then the chains
        for line in reversed([r for r in new if r.startswith("-A ") and r not in old]):
            _run("iptables", "-w", "-t", table, "-D", *shlex.split(line)[1:], check=False)
            undone.append(f"iptables -t {table} -D {line[3:]}")
        for line in [c for c in new if c.startswith("-N ") and c not in old]:
            chain = line.split()[1]
            _run("iptables", "-w", "-t", table, "-F", chain, check=False)
            _run("iptables", "-w", "-t", table, "-X", chain, check=False)
            undone.append(f"iptables -t {table} -X {chain}")
        for line in old:
            if line.startswith("-P ") and line not in new:
                _run("iptables", "-w", "-t", table, *shlex.split(line), check=False)
                undone.append(f"iptables -t {table} {line}")
    for path, value in before.sysctls.items():
        if Path(path).read_text().strip() != value:
            Path(path).write_text(value + "\n")
            undone.append(f"{path} = {value}")
    left = differences(before, host_state())
    if left:
        raise RuntimeError("the host still differs after dockerd: " + "; ".join(left))
    return undone


def differences(before: HostState, now: HostState) -> list[str]:
    found = [
        f"{p} {before.sysctls[p]} -> {v}"
        for p, v in now.sysctls.items()
        if v != before.sysctls.get(p)
    ]
    found += [f"new link {link}" for link in sorted(now.links - before.links)]
    for table in TABLES:
        found += [f"{table}: {r}" for r in now.rules[table] if r not in before.rules[table]]
        found += [f"{table}: lost {r}" for r in before.rules[table] if r not in now.rules[table]]
    found += [f"mount {m}" for m in now.mounts if m not in before.mounts]
    found += sorted(now.paths - before.paths)
    return found


# -- the engine ----------------------------------------------------------------------------


@dataclass
class DockerEngine:
    folder: Path
    host: str
    """DOCKER_HOST for its socket."""
    process: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def docker(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        """Runs the `docker` client against this engine; returns its stdout."""
        done = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, env=self.env
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"docker {shlex.join(args)} failed ({done.returncode}):\n{done.stdout[-4000:]}"
                f"\n{done.stderr[-4000:]}"
            )
        return done.stdout

    def answers(self) -> bool:
        done = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=10,
            env=self.env,
        )
        return done.returncode == 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _needs() -> None:
    if os.geteuid() != 0:
        raise RuntimeError("dockerd runs as root here: run the container tests as root")
    missing = [b for b in ("dockerd", "docker", "iptables", "ip") if shutil.which(b) is None]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} missing: apt-get install --no-install-recommends docker.io "
            "iptables iproute2 (scripts/test.sh)"
        )


def _processes_under(folder: Path) -> list[int]:
    """Processes whose command line names the folder: containerd and its shims, which outlive
    a killed dockerd."""
    pids = []
    needle = str(folder).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@contextmanager
def docker_engine(ready_timeout_s: float = 60) -> Iterator[DockerEngine]:
    """A running dockerd of its own (data root, exec root, pidfile, socket in a fresh folder
    under /tmp: containerd's socket paths must stay short); everything undone after."""
    _needs()
    before = host_state()
    if "docker0" in before.links:
        raise RuntimeError("a docker0 link exists: another dockerd runs here; stop it first")
    folder = Path(tempfile.mkdtemp(prefix="inferd-docker-", dir="/tmp"))
    log_path = folder / "dockerd.log"
    socket = folder / "docker.sock"
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket}", "DOCKER_CONFIG": str(folder / "cli")}
    env["DOCKER_BUILDKIT"] = "0"  # the classic builder: Debian's client has no buildx plugin
    process: subprocess.Popen[bytes] | None = None
    try:
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    "dockerd",
                    "--data-root", str(folder / "data"),
                    "--exec-root", str(folder / "exec"),
                    "--pidfile", str(folder / "dockerd.pid"),
                    "--host", f"unix://{socket}",
                    "--config-file", str(_empty_config(folder)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        engine = DockerEngine(folder, env["DOCKER_HOST"], process, log_path, env)
        deadline = time.monotonic() + ready_timeout_s
        while not engine.answers():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not start:\n{engine.log()[-4000:]}")
            time.sleep(0.2)
        yield engine
    finally:
        try:
            if process is not None:
                _stop(process, folder, env)
        finally:
            try:
                restore_host(before, [folder])
            finally:
                shutil.rmtree(folder, ignore_errors=True)


def _empty_config(folder: Path) -> Path:
    """dockerd reads /etc/docker/daemon.json by default: this engine ignores the host's."""
    path = folder / "daemon.json"
    path.write_text("{}\n")
    return path


def _stop(process: subprocess.Popen[bytes], folder: Path, env: dict[str, str]) -> None:
    """Removes the containers, stops dockerd (SIGTERM, then SIGKILL after 30 s), then kills
    whatever of its children outlived it."""
    if process.poll() is None:
        try:
            ids = subprocess.run(
                ["docker", "ps", "--all", "--quiet"],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
            ).stdout.split()
            if ids:
                subprocess.run(
                    ["docker", "rm", "--force", *ids], capture_output=True, env=env, timeout=60
                )
        except subprocess.TimeoutExpired:
            pass  # dockerd does not answer: it is stopped below all the same
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    for pid in _processes_under(folder):  # containerd, shims: only if dockerd could not stop them
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    while _processes_under(folder) and time.monotonic() < deadline:
        time.sleep(0.1)


# -- the base image ---------------------------------------------------------------------------


def base_image(engine: DockerEngine, cache: Path, tag: str = "python:3.11-slim") -> str:
    """The stand-in for `python:3.11-slim`, as `scripts/build-image.sh` builds it without a
    registry (inferd.tools.base_image), on this engine."""
    return import_base(engine.docker, cache, tag)


def main() -> None:
    """An engine for a shell until Ctrl-C (or SIGTERM)."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with docker_engine() as engine:
        print(f"export DOCKER_HOST={engine.host} DOCKER_BUILDKIT=0", flush=True)
        if "--base-image" in sys.argv:
            base_image(engine, Path(__file__).resolve().parents[1] / ".cache" / "container")
            print("python:3.11-slim imported", flush=True)
        while not stop and engine.process.poll() is None:
            time.sleep(0.5)


if __name__ == "__main__":
    main()
