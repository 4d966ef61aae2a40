"""Shared pieces of the benchmark scripts: machine description, raw ONNX Runtime, wrk, server,
the parts an entry point runs.

Benchmarks measure; they never assert. Every figure is taken in one run, side by side with raw
in-process ONNX Runtime on the same machine, and written with the command that produced it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from inferd.bench.launch import start_server
from inferd.bench.machine import describe

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


machine_description = describe


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pid_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass(frozen=True)
class RawResult:
    batch: int
    items_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_item: float


def measure_raw(
    run: Callable[[int], object], batch: int, duration_s: float, warmup: int = 3
) -> RawResult:
    """Calls `run(batch)` back to back for `duration_s`; latency is per call (per batch)."""
    for _ in range(warmup):
        run(batch)
    latencies = []
    cpu0, t0 = process_cpu_s(), time.perf_counter()
    while time.perf_counter() - t0 < duration_s:
        start = time.perf_counter()
        run(batch)
        latencies.append(time.perf_counter() - start)
    elapsed, cpu = time.perf_counter() - t0, process_cpu_s() - cpu0
    items = batch * len(latencies)
    qs = np.percentile(np.array(latencies) * 1000, [50, 99])
    return RawResult(batch, items / elapsed, float(qs[0]), float(qs[1]), cpu * 1000 / items)


class Server:
    """`inferd serve` on 127.0.0.1 (started as the integration tests start it), ready to serve:
    every model loaded, /ready answering 200. Response caches are off unless `args` turn them
    on (`--response-cache`): the benchmarks' loads repeat texts, and they measure the models."""

    def __init__(
        self,
        repo: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        entry: Sequence[str] = (sys.executable, "-m", "inferd"),
    ) -> None:
        log = Path(tempfile.mkstemp(prefix="inferd-bench-", suffix=".log")[1])
        self._running = start_server(
            repo,
            log,
            "--log-level",
            "warning",
            "--no-response-cache",
            *args,
            env=dict(env or {}),
            entry=entry,
        )
        self.url = self._running.url
        self.grpc_target = self._running.grpc_target
        self.process = self._running.process
        if httpx.get(self.url + "/ready", timeout=5).status_code != 200:
            self.stop()
            raise RuntimeError(f"inferd not ready:\n{self._running.log()}")

    def cpu_s(self) -> float:
        return pid_cpu_s(self.process.pid)

    def stop(self) -> None:
        self._running.stop(timeout_s=30)


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    requests: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    server_cpu_ms_per_request: float


_WRK_LUA = """
local bodies = {{}}
for line in io.lines("{bodies}") do bodies[#bodies + 1] = line end
local i = 0
request = function()
  i = (i % #bodies) + 1
  return wrk.format("POST", "{path}", {{["Content-Type"] = "application/json"}}, bodies[i])
end
"""


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def require_wrk() -> None:
    """Exits with a hint when wrk (the load generator of these scripts) is missing."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install wrk")


def run_wrk(
    server: Server, path: str, bodies: bytes | list[bytes], concurrency: int, duration_s: float
) -> LoadResult:
    """Closed loop at fixed concurrency with wrk (one thread: it disturbs the server least),
    cycling through `bodies` (one JSON document each, without newlines)."""
    if isinstance(bodies, bytes):
        bodies = [bodies]
    if any(b"\n" in b for b in bodies):
        raise ValueError("request bodies must be single-line JSON")
    with tempfile.TemporaryDirectory() as tmp:
        body_path = Path(tmp) / "bodies.jsonl"
        body_path.write_bytes(b"\n".join(bodies) + b"\n")
        script = Path(tmp) / "post.lua"
        script.write_text(_WRK_LUA.format(bodies=body_path, path=path))
        command = [
            "wrk",
            "-t1",
            f"-c{concurrency}",
            f"-d{duration_s:.0f}s",
            "--latency",
            "--timeout",
            "30s",
            "-s",
            str(script),
            server.url + path,
        ]
        cpu0 = server.cpu_s()
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        cpu = server.cpu_s() - cpu0
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"^\s*50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s*99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    errors = int(non2xx.group(1)) if non2xx else 0
    if socket_errors:
        errors += sum(int(x) for x in socket_errors.groups())
    return LoadResult(concurrency, total, rps, p50, p99, errors, cpu * 1000 / max(total, 1))


@contextlib.contextmanager
def worktree(ref: str, path: Path) -> Iterator[Path]:
    """A checkout of `ref` of this repository at `path` (removed after): serve its code with
    `Server(..., env={"PYTHONPATH": str(path / "src")})`."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), ref], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False
        )


def two_variants(parser: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, str]]:
    """`--variant NAME=REF`, given twice: the (name, git ref) pairs of an A/B between code
    trees (the parser's error otherwise)."""
    variants = [tuple(spec.split("=", 1)) for spec in specs]
    if len(variants) != 2 or any(len(v) != 2 for v in variants):
        parser.error("two variants: NAME=REF NAME=REF")
    return [(name, ref) for name, ref in variants]


def alternated(names: list[str], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, name) of each variant in each round, the order turned each round: a machine
    whose speed moves within minutes weighs on both alike."""
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            yield round_, name


def ratio_line(first: str, second: str, ratios: list[float], what: str) -> str:
    """The A/B's verdict: the median of the rounds' ratios of `what`, and each round's."""
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    return f"{second} / {first}, {what}: median {median_of(ratios):.3f} ({shown})"


def median_of(values: list[float]) -> float:
    return statistics.median(values)


def update_results_section(key: str, text: str) -> None:
    """Replaces the section between `<!-- key:start -->` and `<!-- key:end -->` in RESULTS.md."""
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    current = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    block = f"{start}\n{text.rstrip()}\n{end}"
    if start in current and end in current:
        before = current.split(start)[0]
        after = current.split(end, 1)[1]
        current = before + block + after
    else:
        current = current.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(current)


def publish(key: str, text: str, quick: bool) -> None:
    """Prints a report and, unless it was a quick run, writes it as its section of RESULTS.md."""
    print()
    print(text)
    if not quick:
        update_results_section(key, text)


def parts_help(parts: Mapping[str, tuple[str, str]]) -> str:
    """The epilog of an entry point's --help: the parts it runs besides its own benchmark."""
    width = max(len(name) for name in parts)
    lines = [f"  {name:<{width}}  {question}" for name, (_, question) in parts.items()]
    return "parts (PART --help for each one's options):\n" + "\n".join(lines)


def run_entry(main: Callable[[], object], parts: Mapping[str, tuple[str, str]]) -> None:
    """`python benchmarks/ENTRY.py PART [options]` runs PART, a module of benchmarks/lib with
    its own options and its own section of RESULTS.md (`parts` maps each name to its module and
    the question it answers); without a PART, ENTRY's own benchmark (`main`)."""
    if len(sys.argv) > 1 and sys.argv[1] in parts:
        name = sys.argv[1]
        module = importlib.import_module(parts[name][0])
        sys.argv = [f"{Path(sys.argv[0]).name} {name}", *sys.argv[2:]]
        raise SystemExit(module.main())
    raise SystemExit(main())
