"""Overload: open-loop Poisson arrivals at 4x the measured capacity of a slow model.

First the capacity is measured (closed loop, wrk); then an asyncio client sends requests at 4x
that rate, each with a 1 s deadline, against a bounded queue. Reported: how many were admitted
and answered, the p50/p99 of admitted requests, how fast rejections came back, and that every
request got an answer (none hung, none lost). The client shares the machine's two cores.

    python benchmarks/overload_bench.py            # writes the "overload" section of RESULTS.md
    python benchmarks/overload_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish, require_wrk, run_wrk
from tests.models import slow_model, write_config

WIDTH = 512
LAYERS = 4096  # about 60 ms a request: a rate the Python client can send at 4x


async def open_loop(
    url: str, body: bytes, rate: float, seconds: float, deadline_ms: int
) -> list[tuple[int, float]]:
    """(status, latency s) for every request sent; status 0 for a transport failure."""
    results: list[tuple[int, float]] = []
    rng = random.Random(7)
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    headers = {"Content-Type": "application/json", "X-Request-Timeout-Ms": str(deadline_ms)}
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

        async def one() -> None:
            started = time.perf_counter()
            try:
                response = await client.post("/v2/models/slow/infer", content=body, headers=headers)
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            results.append((status, time.perf_counter() - started))

        tasks = []
        end = time.perf_counter() + seconds
        next_at = time.perf_counter()
        while next_at < end:
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
            next_at += rng.expovariate(rate)
        await asyncio.gather(*tasks)
    return results


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q) * 1000) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--factor", type=float, default=4.0)
    parser.add_argument("--queue", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    require_wrk()
    if args.quick:
        args.seconds = 6
    x = np.full((1, WIDTH), 0.5, dtype=np.float32).tolist()
    body = orjson.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, WIDTH], "data": x}]}
    )
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        slow_model(repo / "slow" / "1" / "model.onnx", layers=LAYERS, width=WIDTH)
        write_config(
            repo / "slow",
            {
                "max_batch_size": 1,
                "runtime": {"intra_op_threads": 1},
                "dynamic_batching": {"max_queue_size": args.queue},
            },
        )
        server = Server(repo)
        try:
            capacity = run_wrk(server, "/v2/models/slow/infer", body, 4, 5).requests_per_s
            rate = capacity * args.factor
            print(f"capacity {capacity:.1f} req/s; sending {rate:.1f} req/s for {args.seconds} s")
            results = asyncio.run(open_loop(server.url, body, rate, args.seconds, 1000))
        finally:
            server.stop()
    counts = Counter(status for status, _ in results)
    admitted = [s for status, s in results if status == 200]
    rejected = [s for status, s in results if status in (429, 503)]
    expired = [s for status, s in results if status == 504]
    command = ("python benchmarks/overload_bench.py " + " ".join(sys.argv[1:])).strip()
    lines = [
        f"## Overload: {args.factor:.0f}x the capacity, open loop",
        "",
        f"Machine: {machine_description()}.",
        f"Model: {LAYERS}-layer MatMul+Tanh chain (width {WIDTH}), one intra-op thread, "
        f"max_batch_size 1, queue of {args.queue}; capacity measured with wrk (closed loop, 4 "
        f"connections): {capacity:.1f} req/s. Then Poisson arrivals at {rate:.1f} req/s for "
        f"{args.seconds:.0f} s from an asyncio httpx client on the same machine, each request "
        "with `X-Request-Timeout-Ms: 1000`.",
        "",
        f"Command: `{command}`",
        "",
        "| outcome | requests | p50 ms | p99 ms | max ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, values in (
        ("200 answered", admitted),
        ("429/503 shed", rejected),
        ("504 deadline", expired),
    ):
        top = max(values) * 1000 if values else float("nan")
        lines.append(
            f"| {label} | {len(values)} | {percentile(values, 50):.1f} | "
            f"{percentile(values, 99):.1f} | {top:.1f} |"
        )
    other = {k: v for k, v in counts.items() if k not in (200, 429, 503, 504)}
    lines += [
        "",
        f"Sent {len(results)}, answered {sum(counts.values()) - counts.get(0, 0)}; "
        f"status counts {dict(sorted(counts.items()))}; other outcomes: {other or 'none'}.",
    ]
    text = "\n".join(lines)
    publish("overload", text, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
