"""Where a served request's time goes, for a check that compares a server with raw ONNX
Runtime: a closed-loop load spread over client processes (one Python process's GIL must not be
the ceiling it measures), and what the server says of the same window: the mean time per stage
of a request and the rows per batch (its own /metrics), and its CPU per request, the event
loop's thread apart from the others (/proc, Linux).

A served rate under the raw one then says which of these it was: a queue (the runtime is the
ceiling), the event loop's thread near a whole core per second (the server's Python is), or the
clients' CPU (the load generator is).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STAGES = ("queue", "preprocess", "inference", "postprocess")


def _embed_clients(
    url: str, model: str, texts: list[str], per: int, threads: int, seconds: float, first: int
) -> tuple[int, list[int], float, float]:
    """One client process: `threads` closed-loop clients of /embed for `seconds`; the vectors
    received, the statuses other than 200, the process's CPU seconds and the window's seconds
    (from its first request to its last answer)."""
    from concurrent.futures import ThreadPoolExecutor

    started_cpu = time.process_time()
    started = time.perf_counter()
    stop_at = started + seconds
    counts = [0] * threads
    statuses: list[int] = []

    def client(index: int) -> None:
        i = first + index * 100_000
        with httpx.Client(timeout=60) as http:
            while time.perf_counter() < stop_at:
                start = (i * per) % (len(texts) - per)
                body = orjson.dumps({"model": model, "texts": texts[start : start + per]})
                response = http.post(
                    f"{url}/embed", content=body, headers={"content-type": "application/json"}
                )
                if response.status_code == 200:
                    counts[index] += len(orjson.loads(response.content)["embeddings"])
                else:
                    statuses.append(response.status_code)
                i += 1

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(client, range(threads)))
    window = time.perf_counter() - started
    return sum(counts), statuses, time.process_time() - started_cpu, window


@dataclass(frozen=True)
class Load:
    vectors_per_s: float
    requests: int
    statuses: list[int]
    client_cpu_s: float
    seconds: float
    """The load's window: the longest of its processes' (their start left out)."""


def embed_load(
    url: str,
    model: str,
    texts: list[str],
    per: int,
    clients: int,
    seconds: float,
    processes: int,
) -> Load:
    """`clients` closed-loop clients of /embed (`per` texts a request) spread over `processes`
    client processes, for `seconds`."""
    processes = max(1, min(processes, clients))
    shares = [clients // processes + (p < clients % processes) for p in range(processes)]
    # spawned, not forked: the parent may hold ONNX Runtime sessions and their threads
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [
            pool.submit(_embed_clients, url, model, texts, per, n, seconds, p * 10_000_000)
            for p, n in enumerate(shares)
        ]
        results = [f.result() for f in futures]
    window = max(r[3] for r in results)
    vectors = sum(r[0] for r in results)
    return Load(
        vectors_per_s=vectors / window,
        requests=vectors // per,
        statuses=[s for r in results for s in r[1]],
        client_cpu_s=sum(r[2] for r in results),
        seconds=window,
    )


@dataclass(frozen=True)
class Snapshot:
    stage_s: dict[str, float]
    """Each stage's total seconds over the model's requests so far."""
    requests: float
    batch_rows: float
    batches: float
    loop_cpu_s: float
    """CPU seconds of the server's main thread (the event loop's)."""
    other_cpu_s: float
    """CPU seconds of its other threads (runtimes, tokenizing, ONNX Runtime's own)."""


def snapshot(url: str, pid: int, model: str) -> Snapshot:
    stage_s = dict.fromkeys(STAGES, 0.0)
    requests = batch_rows = batches = 0.0
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name == "inferd_stage_duration_seconds_sum":
                stage = sample.labels.get("stage", "")
                if stage in stage_s:
                    stage_s[stage] += sample.value
            elif sample.name == "inferd_stage_duration_seconds_count":
                if sample.labels.get("stage") == "inference":
                    requests += sample.value
            elif sample.name == "inferd_batch_size_sum":
                batch_rows += sample.value
            elif sample.name == "inferd_batch_size_count":
                batches += sample.value
    loop = other = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended meanwhile
            continue
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        if tid == str(pid):
            loop += cpu
        else:
            other += cpu
    return Snapshot(stage_s, requests, batch_rows, batches, loop, other)


def where_the_time_goes(before: Snapshot, after: Snapshot, load: Load) -> str:
    """One line: per request, the mean ms of each stage and the CPU ms of the server's event
    loop, of its other threads and of the clients; the mean rows a batch; and the event loop's
    share of one core over the window."""
    requests = max(after.requests - before.requests, 1.0)
    stages = ", ".join(
        f"{stage} {(after.stage_s[stage] - before.stage_s[stage]) * 1000 / requests:.1f}"
        for stage in STAGES
    )
    batches = max(after.batches - before.batches, 1.0)
    rows = (after.batch_rows - before.batch_rows) / batches
    loop_s = after.loop_cpu_s - before.loop_cpu_s
    other_s = after.other_cpu_s - before.other_cpu_s
    return (
        f"per request (ms): {stages}; CPU: event loop {loop_s * 1000 / requests:.2f}, "
        f"other threads {other_s * 1000 / requests:.2f}, clients "
        f"{load.client_cpu_s * 1000 / max(load.requests, 1):.2f}; {rows:.1f} rows a batch; "
        f"event loop busy {loop_s / load.seconds:.0%} of a core"
    )
