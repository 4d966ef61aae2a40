"""The garbage collector's pauses in a serving process, A/B between two code trees.

Python's cyclic collector scans every object it tracks in a collection of its oldest
generation; a server's heap is mostly made once (the web framework, the runtime's bindings,
tokenizers, configurations, metrics), so such a collection pauses the event loop, and every
answer waiting on it, for as long as that heap takes to scan. Each tree serves the demo model
(`inferd serve` on the repository `inferd demo` writes) with a small probe on its path
(a `sitecustomize` module that times every collection by `gc.callbacks` and writes them out
when the process exits); a client sends `--requests` texts one at a time, each text new (no
response cache), and the collections that began during the load are reported: of each
generation, how many and their longest and total pause, with the requests' latency.

    python benchmarks/ab_bench.py heap --variant before=HEAD~1 --variant after=HEAD
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, alternated, machine_description, median_of, two_variants, worktree
from inferd.tools.demo import build_demo

PROBE = """
import atexit, gc, json, os, time

_began = [0.0]
_seen = []


def _timed(phase, info):
    if phase == "start":
        _began[0] = time.perf_counter()
    else:
        _seen.append((info["generation"], _began[0], time.perf_counter() - _began[0]))


gc.callbacks.append(_timed)


@atexit.register
def _write():
    with open(os.environ["INFERD_HEAP_PROBE"], "w") as out:
        json.dump(_seen, out)
"""
TEXT = "the quick brown fox jumps over the lazy dog and keeps running through the field"


def one_round(tree: Path, repo: Path, probe: Path, requests: int) -> dict[str, float]:
    """One server of `tree` under `requests` new texts, one at a time; what the probe saw
    (perf_counter is the machine's monotonic clock, shared by both processes)."""
    out = probe / "seen.txt"
    env = {"PYTHONPATH": f"{probe}:{tree / 'src'}", "INFERD_HEAP_PROBE": str(out)}
    server = Server(repo, env=env)
    latencies = []
    try:
        with httpx.Client(timeout=30) as client:
            for i in range(50):  # warm-up
                client.post(server.url + "/embed", json={"texts": [f"{TEXT} warm {i}"]})
            began = time.perf_counter()
            for i in range(requests):
                words = TEXT.split()[: 4 + i % 12]
                body = {"texts": [" ".join(words) + f" number {i}"]}
                sent = time.perf_counter()
                response = client.post(server.url + "/embed", json=body)
                latencies.append(time.perf_counter() - sent)
                response.raise_for_status()
            ended = time.perf_counter()
    finally:
        server.stop()
    seen = [c for c in orjson.loads(out.read_bytes()) if began <= c[1] <= ended]
    result = {
        "p50_ms": float(np.percentile(latencies, 50)) * 1000,
        "p99_ms": float(np.percentile(latencies, 99)) * 1000,
        "max_ms": max(latencies) * 1000,
    }
    for generation in (0, 1, 2):
        pauses = [c[2] for c in seen if c[0] == generation]
        result[f"gen{generation}_n"] = len(pauses)
        result[f"gen{generation}_max_ms"] = max(pauses, default=0.0) * 1000
        result[f"gen{generation}_total_ms"] = sum(pauses) * 1000
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", required=True, help="NAME=REF")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    variants = two_variants(parser, args.variant)
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="inferd-heap-") as tmp, contextlib.ExitStack() as st:
        repo = Path(tmp) / "repo"
        build_demo(repo)
        probe = Path(tmp) / "probe"
        probe.mkdir()
        (probe / "sitecustomize.py").write_text(PROBE)
        trees = {name: st.enter_context(worktree(ref, Path(tmp) / name)) for name, ref in variants}
        for round_, name in alternated(list(trees), args.rounds):
            got = one_round(trees[name], repo, probe, args.requests)
            results[name].append(got)
            print(f"round {round_ + 1} {name}: {orjson.dumps(got).decode()}", flush=True)
    print(f"\nMachine: {machine_description()}")
    print(f"Command: python benchmarks/ab_bench.py heap {' '.join(sys.argv[1:])}\n")
    print(
        f"The demo model, {args.requests} new texts one at a time a round, {args.rounds} "
        "rounds; medians of the rounds.\n"
    )
    print(
        "| variant | p50 ms | p99 ms | slowest ms | collections of the oldest generation "
        "| its longest pause, ms | all collections' pauses, ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rounds in results.items():

        def med(field: str, rounds: list[dict[str, float]] = rounds) -> float:
            return median_of([r[field] for r in rounds])

        total = median_of([sum(r[f"gen{g}_total_ms"] for g in (0, 1, 2)) for r in rounds])
        print(
            f"| {name} | {med('p50_ms'):.1f} | {med('p99_ms'):.1f} | {med('max_ms'):.1f} | "
            f"{med('gen2_n'):.0f} | {med('gen2_max_ms'):.1f} | {total:.1f} |"
        )
    return 0
