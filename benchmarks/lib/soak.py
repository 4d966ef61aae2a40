"""Soak: minutes of mixed traffic on the demo model, long and short texts alternating, with bad
requests mixed in; resident memory over time and its slope, errors by code, throughput drift.

Target: no growth in resident memory after warm-up (slope within noise) and zero 5xx.

    python benchmarks/serving_bench.py soak --minutes 5  # writes the "soak" section of RESULTS.md
    python benchmarks/serving_bench.py soak --minutes 1 --quick
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, update_results_section
from inferd.tools.demo import build_demo
from tests.text_corpus import sentences

SAMPLE_S = 5.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def requests_plan(rng: random.Random) -> list[tuple[str, object]]:
    words = " ".join(sentences(200)).split()
    long_text = " ".join(words[:400])  # truncated to the model's 256 tokens
    short = sentences(50)
    plan: list[tuple[str, object]] = []
    for i in range(200):
        plan.append(("/embed", {"model": "minilm", "texts": [long_text] * 8}))  # 8 x 256 tokens
        plan.append(("/embed", {"model": "minilm", "texts": [short[i % 50]]}))
        plan.append(("/predict", {"model": "sentiment", "texts": [short[(i * 7) % 50]]}))
        if i % 5 == 0:  # bad requests: 4001, 4004, 4040
            plan.append(("/embed", {"model": "minilm", "texts": []}))
            plan.append(("/embed", {"model": "minilm", "texts": [3]}))
            plan.append(("/embed", {"model": "nope", "texts": ["x"]}))
    return plan


async def drive(url: str, seconds: float, pid: int, concurrency: int) -> dict[str, object]:
    rng = random.Random(3)
    plan = requests_plan(rng)
    codes: Counter[int] = Counter()
    statuses: Counter[int] = Counter()
    samples: list[tuple[float, float, int]] = []  # (t, rss MB, good requests so far)
    good = 0
    end = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def worker(offset: int) -> None:
            nonlocal good
            i = offset
            while time.monotonic() < end:
                path, body = plan[i % len(plan)]
                i += concurrency
                response = await client.post(path, json=body)
                statuses[response.status_code] += 1
                if response.status_code == 200:
                    good += 1
                else:
                    codes[int(response.json().get("code", 0))] += 1

        async def sampler() -> None:
            started = time.monotonic()
            while time.monotonic() < end:
                samples.append((time.monotonic() - started, rss_mb(pid), good))
                await asyncio.sleep(SAMPLE_S)

        await asyncio.gather(sampler(), *(worker(k) for k in range(concurrency)))
    return {"codes": codes, "statuses": statuses, "samples": samples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--warmup-fraction", type=float, default=0.2)
    parser.add_argument("--quick", action="store_true", help="nothing written")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_demo(Path(tmp) / "demo")
        server = Server(repo)
        try:
            result = asyncio.run(
                drive(server.url, args.minutes * 60, server.process.pid, args.concurrency)
            )
        finally:
            server.stop()
    samples = result["samples"]
    assert isinstance(samples, list)
    t = np.array([s[0] for s in samples])
    rss = np.array([s[1] for s in samples])
    done = np.array([s[2] for s in samples])
    start = int(len(t) * args.warmup_fraction)
    slope = float(np.polyfit(t[start:] / 60, rss[start:], 1)[0]) if len(t) - start >= 3 else 0.0
    rates = np.diff(done) / np.diff(t) if len(t) > 1 else np.array([0.0])
    third = max(1, len(rates) // 3)
    statuses = result["statuses"]
    codes = result["codes"]
    assert isinstance(statuses, Counter) and isinstance(codes, Counter)
    five_xx = sum(n for status, n in statuses.items() if status >= 500)
    command = ("python benchmarks/serving_bench.py soak " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Soak: mixed traffic, long and short texts alternating",
        "",
        f"Machine: {machine_description()}.",
        f"Demo repository; {args.concurrency} concurrent Python clients for "
        f"{args.minutes:g} min: 8 x 256-token texts, then one short text to /embed, one to "
        "/predict, and every fifth round three bad requests (4001, 4004, 4040). Resident "
        f"memory sampled every {SAMPLE_S:.0f} s; the first {args.warmup_fraction:.0%} is warm-up.",
        "",
        f"Command: `{command}`",
        "",
        f"- resident memory after warm-up: min {rss[start:].min():.0f} MB, max "
        f"{rss[start:].max():.0f} MB, slope {slope:+.2f} MB/min "
        f"(whole run: {rss.min():.0f} to {rss.max():.0f} MB)",
        f"- good requests per second: first third {rates[:third].mean():.1f}, last third "
        f"{rates[-third:].mean():.1f}",
        f"- statuses: {dict(sorted(statuses.items()))}; error codes: {dict(sorted(codes.items()))}",
        f"- 5xx: {five_xx}",
        "",
        "| minute | resident MB | good req/s |",
        "| ---: | ---: | ---: |",
    ]
    for k in range(0, len(t), max(1, int(60 / SAMPLE_S) // 2)):
        rate = rates[min(k, len(rates) - 1)] if len(rates) else 0.0
        lines.append(f"| {t[k] / 60:.1f} | {rss[k]:.0f} | {rate:.1f} |")
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        update_results_section("soak", text)
    return 0 if five_xx == 0 else 1
