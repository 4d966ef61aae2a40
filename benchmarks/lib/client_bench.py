"""What the load generator itself costs: one inferd (the demo model, `/embed`, one short text a
request) answered at concurrency 1 to three clients in the same process, rounds interleaved
(this machine's speed moves within minutes): httpx's AsyncClient (what `inferd bench` used
before), aiohttp's ClientSession (what it uses now: `inferd.bench.load`) and a lean
raw asyncio HTTP/1.1 client (benchmarks/overload_bench.py's, the floor a Python client can
reach). Reported: each client's p50 and the client process's CPU a request (user + system,
getrusage), medians of the rounds. The server is the same for all three, so the differences
are the clients'.

    python benchmarks/serving_bench.py clients  # writes the "client" section of RESULTS.md
    python benchmarks/serving_bench.py clients --quick
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from inferd.bench.load import closed_loop
from inferd.tools.demo import build_demo
from overload_bench import lone_latencies, request_bytes

BODY = (
    b'{"model": "minilm", "texts": ["the quick brown fox jumps over the lazy dog and keeps '
    b'on running far away from the farm"]}'
)
PATH = "/embed"
HEADERS = {"content-type": "application/json"}
SKIP = 20
"""Requests left out of each run's p50 (the connection's first)."""


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def httpx_run(url: str, requests: int) -> list[float]:
    took = []
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(requests):
            began = time.perf_counter()
            response = await client.post(PATH, content=BODY, headers=HEADERS)
            await response.aread()
            if response.status_code != 200:
                raise RuntimeError(response.text)
            took.append(time.perf_counter() - began)
    return took[SKIP:]


def aiohttp_run(url: str, requests: int) -> list[float]:
    run = asyncio.run(closed_loop(url, PATH, lambda: BODY, 1, 60.0, requests))
    if any(s.status != 200 for s in run.samples):
        raise RuntimeError("aiohttp: a request failed")
    return [s.latency_s for s in run.samples][SKIP:]


def lean_run(url: str, seconds: float) -> list[float]:
    payload = request_bytes(urlparse(url).netloc, BODY, PATH)
    return lone_latencies(url, [payload], seconds)[SKIP:]


def measured(run: Callable[[], list[float]]) -> tuple[float, float]:
    """(p50 ms, client CPU ms a request) of one run."""
    before = cpu_s()
    took = run()
    spent = cpu_s() - before
    return float(np.median(took)) * 1000, spent / (len(took) + SKIP) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 short rounds, RESULTS.md kept")
    args = parser.parse_args()
    rounds, requests, seconds = (2, 200, 1.0) if args.quick else (5, 600, 3.0)
    with tempfile.TemporaryDirectory(prefix="inferd-client-") as tmp:
        repo = Path(tmp) / "repo"
        build_demo(repo)
        server = Server(repo)
        try:
            ways: dict[str, Callable[[], list[float]]] = {
                "httpx AsyncClient": lambda: asyncio.run(httpx_run(server.url, requests)),
                "aiohttp ClientSession (`inferd bench`)": lambda: aiohttp_run(server.url, requests),
                "lean raw asyncio HTTP/1.1": lambda: lean_run(server.url, seconds),
            }
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
            for _ in range(rounds):
                for name, run in ways.items():
                    results[name].append(measured(run))
        finally:
            server.stop()
    rows = [
        f"| {name} | {np.median([p for p, _ in runs]):.2f} | "
        f"{np.median([c for _, c in runs]):.2f} |"
        for name, runs in results.items()
    ]
    text = "\n".join(
        [
            "### The load generator's own cost: three Python clients on one server",
            "",
            f"Machine: {machine_description()}",
            "",
            "Command: `python benchmarks/serving_bench.py clients` (the demo model's `/embed`, one "
            f"short text a request, concurrency 1; {rounds} rounds, the clients in turn, "
            f"{requests} requests (the lean client {seconds:g} s) each a round; medians of the "
            "rounds; the client's CPU is its process's user + system time over its requests).",
            "",
            "| client | p50 ms | client CPU ms a request |",
            "|---|---:|---:|",
            *rows,
        ]
    )
    publish("client", text, args.quick)
