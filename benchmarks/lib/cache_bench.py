"""The response cache on a workload where 30% of requests repeat an earlier one.

The demo's /embed (all-MiniLM-L6-v2), one text a request, texts of mixed length (8-128
tokens); 70% of requests carry a text never sent before, 30% repeat one sent earlier (chosen
uniformly among them). The same server configuration twice, cache on (`--response-cache`,
the demo's own setting) and off (`--no-response-cache`), in alternating rounds; a closed loop
of 32 connections (throughput) and of 1 (latency); and raw in-process ONNX Runtime at its best
batch size on the same texts, as the ceiling without a cache.

    python benchmarks/jobs_bench.py cache  # writes the "cache" section of RESULTS.md
    python benchmarks/jobs_bench.py cache --quick
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
import orjson
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from inferd.tools.demo import build_demo
from overload_bench import closed_loop, request_bytes, run_loop
from serving_bench import raw_best
from texts import make_texts

REPEAT_SHARE = 0.3


def workload(texts: list[str], count: int, seed: int = 1) -> tuple[list[str], float]:
    """`count` request texts: each, with probability REPEAT_SHARE, one sent before; else a new
    one (a base text made unique by a number). Also the share that repeats, as made."""
    rng = random.Random(seed)
    sent: list[str] = []
    out = []
    repeats = 0
    for i in range(count):
        if sent and rng.random() < REPEAT_SHARE:
            out.append(rng.choice(sent))
            repeats += 1
        else:
            text = f"{i} {texts[i % len(texts)]}"
            sent.append(text)
            out.append(text)
    return out, repeats / count


def cache_counts(url: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith('inferd_cache_lookups_total{model="minilm"'):
            outcome = line.split('outcome="')[1].split('"')[0]
            counts[outcome] = float(line.split()[-1])
    return counts


def run(
    server: Server, payloads: list[bytes], connections: int, seconds: float
) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms) of a closed loop; each round starts the sequence afresh
    on a server whose cache is empty (a new server per round)."""
    host, port = server.url.removeprefix("http://").split(":")
    tally = run_loop(closed_loop(host, int(port), payloads, connections, seconds, 30))
    ok = [o.client_s for o in tally.outcomes if o.status == 200]
    assert len(ok) == len(tally.outcomes), "errors during the run"
    p50, p99 = np.percentile(np.array(ok) * 1000, [50, 99])
    return len(ok) / seconds, float(p50), float(p99)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 5, 1
    with tempfile.TemporaryDirectory(prefix="inferd-cache-") as name:
        repo = build_demo(Path(name) / "demo")
        tokenizer = Tokenizer.from_file(str(repo / "minilm" / "1" / "tokenizer.json"))
        tokenizer.no_padding()
        base = make_texts(tokenizer, 600)
        texts, share = workload(base, 40_000)
        host = "127.0.0.1"
        payloads = [request_bytes(host, orjson.dumps({"texts": [t]}), "/embed") for t in texts]
        raw, raw_batch, _ = raw_best(
            repo / "minilm" / "1" / "model.onnx",
            repo / "minilm" / "1" / "tokenizer.json",
            texts[:2000],
            256,
            args.seconds / 3,
        )
        results: dict[str, dict[int, list[tuple[float, float, float]]]] = {"off": {}, "on": {}}
        hit_share: list[float] = []
        for _ in range(args.rounds):
            for mode, flag in (("off", "--no-response-cache"), ("on", "--response-cache")):
                for connections in (1, 32):
                    server = Server(repo, flag)
                    try:
                        figures = run(server, payloads, connections, args.seconds)
                        if mode == "on" and connections == 32:
                            counts = cache_counts(server.url)
                            looked = sum(counts.values())
                            hit_share.append((looked - counts.get("miss", 0)) / max(looked, 1))
                    finally:
                        server.stop()
                    results[mode].setdefault(connections, []).append(figures)
                    print(mode, connections, figures, flush=True)

    def med(mode: str, connections: int, index: int) -> float:
        return statistics.median(r[index] for r in results[mode][connections])

    rows = []
    for connections in (1, 32):
        off, on = med("off", connections, 0), med("on", connections, 0)
        rows.append(
            f"| {connections} | {off:.0f} / {med('off', connections, 1):.1f} / "
            f"{med('off', connections, 2):.1f} | {on:.0f} / {med('on', connections, 1):.1f} / "
            f"{med('on', connections, 2):.1f} | {on / off:.2f}x |"
        )
    command = ("python benchmarks/jobs_bench.py cache " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Response cache: 30% repeated requests, cache on vs off",
        "",
        f"Machine: {machine_description()}.",
        f"Workload: /embed on the demo (all-MiniLM-L6-v2), one text of 8-128 tokens a request, "
        f"{share:.1%} of requests repeat an earlier text; a fresh server (empty cache) per "
        f"round, {args.rounds} rounds of {args.seconds:g} s per cell, medians. The client "
        "(raw asyncio HTTP/1.1) shares the two cores.",
        f"Raw in-process ONNX Runtime on the same texts, no cache: {raw:.0f} texts/s "
        f"(its best batch size, {raw_batch}).",
        f"Share of lookups answered without running (hits and coalesced), cache on, 32 "
        f"connections: {statistics.median(hit_share):.1%}.",
        "",
        f"Command: `{command}`",
        "",
        "| connections | cache off: req/s / p50 / p99 ms | cache on: req/s / p50 / p99 ms "
        "| on / off |",
        "| --- | --- | --- | --- |",
        *rows,
    ]
    publish("cache", "\n".join(lines), args.quick)
    return 0
