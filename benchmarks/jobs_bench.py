"""Jobs fill idle capacity without slowing interactive traffic: interactive p50/p99 at half
load, without and with a backlog of jobs draining.

The demo's /embed (all-MiniLM-L6-v2, one text of 8-128 tokens a request) in an open loop
(Poisson arrivals) at half the capacity measured first (a closed loop of 32 connections);
rounds alternate between no jobs and a backlog of /embed jobs of 4 texts each, queued
through `POST /v1/jobs` just before the round (more than the round can drain), on Redis
Streams (Debian's redis-server on a free port). One server for each `jobs_max_share` asked
(the share of the time jobs may take while clients come). Reported for each: interactive
p50/p99 each way (medians of the rounds), the change in p99, and the texts per second the
jobs got through meanwhile (the capacity they took from idle time).

    python benchmarks/jobs_bench.py           # writes the "jobs" section of RESULTS.md
    python benchmarks/jobs_bench.py --quick
    python benchmarks/jobs_bench.py --redis-memory   # what Redis holds for each job

`--redis-memory` measures, on the Redis store alone (no server), Redis's `used_memory` for each
job waiting in the queue and for each finished job's kept answer, beside the body and answer
themselves (the bookkeeping of docs/operations.md's Redis sizing).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import redis
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, parts_help, publish, run_entry
from inferd.jobs.record import Job, JobState
from inferd.jobs.redis_store import RedisJobStore
from inferd.jobs.store import QueueBound, ResultBound, finished
from inferd.tools.demo import build_demo
from overload_bench import closed_loop, open_loop, request_bytes, run_loop
from tests.redis_server import redis_server
from texts import make_texts

JOB_TEXTS = 4


PARTS = {
    "cache": ("cache_bench", "the response cache on against off, 30% of requests repeated"),
}


def jobs_done(url: str) -> float:
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("inferd_jobs_total{") and 'outcome="requeued"' not in line:
            total += float(line.split()[-1])
    return total


def p50_p99(values: list[float]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.array(values) * 1000, [50, 99])
    return float(p50), float(p99)


@dataclass
class Measured:
    share: float
    rate: float
    capacity: float
    backlog: int
    results: dict[str, list[tuple[float, float]]]
    drained: list[float]

    def med(self, mode: str, index: int) -> float:
        return statistics.median(r[index] for r in self.results[mode])

    @property
    def change(self) -> float:
        return self.med("jobs", 1) / self.med("no jobs", 1) - 1


def measure(repo: Path, redis_url: str, texts: list[str], share: float, args: Any) -> Measured:
    """One server with `jobs_max_share` = `share`: its capacity, then rounds without and with
    a job backlog at half of it."""
    server = Server(repo, "--jobs-redis-url", redis_url, "--jobs-max-share", str(share))
    try:
        host, port = server.url.removeprefix("http://").split(":")
        payloads = [request_bytes(host, orjson.dumps({"texts": [t]}), "/embed") for t in texts]
        probe = run_loop(closed_loop(host, int(port), payloads, 32, 10, 30))
        capacity = sum(o.status == 200 for o in probe.outcomes) / 10
        rate = capacity / 2
        # a round not counted: the first open loop after the probe runs slower
        run_loop(open_loop(host, int(port), payloads, rate, args.seconds / 2, 30))
        backlog = int(capacity / JOB_TEXTS * args.seconds)  # more than a round drains
        results: dict[str, list[tuple[float, float]]] = {"no jobs": [], "jobs": []}
        drained: list[float] = []
        for _ in range(args.rounds):
            for mode in ("no jobs", "jobs"):
                submitted_from = jobs_done(server.url)
                if mode == "jobs":
                    with httpx.Client(base_url=server.url, timeout=30) as client:
                        for i in range(backlog):
                            group = [texts[(i * JOB_TEXTS + k) % len(texts)] for k in range(4)]
                            body = {"route": "/embed", "body": {"texts": group}}
                            client.post("/v1/jobs", json=body).raise_for_status()
                before = jobs_done(server.url)
                tally = run_loop(open_loop(host, int(port), payloads, rate, args.seconds, 30))
                finished = jobs_done(server.url) - before
                ok = [o.client_s for o in tally.outcomes if o.status == 200]
                assert len(ok) == len(tally.outcomes) and not tally.lost
                results[mode].append(p50_p99(ok))
                if mode == "jobs":
                    drained.append(finished * JOB_TEXTS / args.seconds)
                print(share, mode, results[mode][-1], f"jobs finished {finished:.0f}", flush=True)
                deadline = time.monotonic() + 300
                expected = backlog if mode == "jobs" else 0
                while jobs_done(server.url) - submitted_from < expected:
                    assert time.monotonic() < deadline, "the backlog did not drain"
                    time.sleep(0.5)
                time.sleep(1)
    finally:
        server.stop()
    return Measured(share, rate, capacity, backlog, results, drained)


async def redis_bytes_per_job(url: str, jobs: int) -> tuple[float, float, int, int]:
    """(bytes a queued job adds, bytes a finished job's kept answer adds, body bytes, answer
    bytes): Redis's used_memory over `jobs` jobs, each way."""
    body = orjson.dumps({"texts": ["a report of a few words"] * JOB_TEXTS})
    answer = orjson.dumps({"error": "no model 'absent' (known: minilm)", "code": 4040})
    store = RedisJobStore(
        url, "memory", QueueBound(10**7, 10**12), 86400, 30, ResultBound(10**7, 10**12, 10**9, 1)
    )
    memory = redis.Redis.from_url(url)
    try:
        await store.open()
        base = int(memory.info("memory")["used_memory"])
        for _ in range(jobs):
            await store.submit(Job(route="/embed", body=body))
        queued = int(memory.info("memory")["used_memory"])
        for _ in range(jobs):
            delivery = await store.take("bench", 1.0)
            if delivery is None:
                raise RuntimeError("a queued job was not handed out")
            done = finished(delivery.job, JobState.FAILED, 404, answer)
            await store.finish(delivery, done)
        kept = int(memory.info("memory")["used_memory"])
    finally:
        memory.close()
        await store.close()
    return (queued - base) / jobs, (kept - base) / jobs, len(body), len(answer)


def redis_memory(args: Any) -> int:
    jobs = 2000
    with (
        tempfile.TemporaryDirectory(prefix="inferd-jobs-") as name,
        redis_server(Path(name) / "redis") as url,
    ):
        queued, kept, body, answer = asyncio.run(redis_bytes_per_job(url, jobs))
    command = ("python benchmarks/jobs_bench.py " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Jobs: what Redis holds for each job",
        "",
        f"Machine: {machine_description()}.",
        f"{jobs} jobs queued on the Redis store, then each finished (failed, as a job naming "
        "an absent model does); Redis's `used_memory` before, once queued, once finished.",
        "",
        f"Command: `{command}`",
        "",
        "| | bytes a job (body or answer included) | of which the body or answer |",
        "| --- | --- | --- |",
        f"| waiting in the queue | {queued:.0f} | {body} |",
        f"| finished: its answer kept (body dropped) | {kept:.0f} | {answer} |",
    ]
    publish("jobs-redis-memory", "\n".join(lines), args.quick)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=parts_help(PARTS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--shares", default="1,0.3,0.1", help="jobs_max_share values, one server each"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--redis-memory", action="store_true", help="Redis's bytes for each job (no server)"
    )
    args = parser.parse_args()
    if args.redis_memory:
        return redis_memory(args)
    if args.quick:
        args.seconds, args.rounds = 6, 1
    shares = [float(x) for x in args.shares.split(",")]
    with tempfile.TemporaryDirectory(prefix="inferd-jobs-") as name:
        tmp = Path(name)
        repo = build_demo(tmp / "demo")
        tokenizer = Tokenizer.from_file(str(repo / "minilm" / "1" / "tokenizer.json"))
        tokenizer.no_padding()
        texts = make_texts(tokenizer, 600)
        with redis_server(tmp / "redis") as url:
            measured = [measure(repo, url, texts, share, args) for share in shares]

    command = ("python benchmarks/jobs_bench.py " + " ".join(sys.argv[1:])).strip()
    rows = [
        f"| {m.share:g} | {m.rate:.0f} | {m.med('no jobs', 0):.1f} / {m.med('no jobs', 1):.1f} | "
        f"{m.med('jobs', 0):.1f} / {m.med('jobs', 1):.1f} | {m.change:+.0%} | "
        f"{statistics.median(m.drained):.0f} |"
        for m in measured
    ]
    lines = [
        "## Jobs: interactive latency at half load while a job backlog drains",
        "",
        f"Machine: {machine_description()}.",
        "Interactive: /embed on the demo, one text a request, in an open loop at half the "
        "capacity measured with 32 connections (each server measures its own). Jobs: a "
        f"backlog of /embed jobs of {JOB_TEXTS} texts (more than a round drains), queued on "
        f"Redis Streams before each 'jobs' round. One server per `jobs_max_share`; "
        f"{args.rounds} rounds of {args.seconds:g} s each way, medians; the client shares "
        "the two cores.",
        "",
        f"Command: `{command}`",
        "",
        "| jobs_max_share | interactive req/s | alone: p50 / p99 ms | with a job backlog "
        "draining: p50 / p99 ms | p99 change | jobs' texts/s meanwhile |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
    ]
    publish("jobs", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    run_entry(main, PARTS)
