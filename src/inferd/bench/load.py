"""The two ways `inferd bench` loads a server.

Closed loop: `concurrency` clients, each sending its next request when its last one is
answered (what most benchmark tools do; the client slows down with the server, which hides
queueing). Open loop: requests arrive at a fixed rate with Poisson gaps, whether or not the
server keeps up, and each latency is measured from the moment the request was due, so queueing
(in the server or in the client) is counted honestly.

Both stop at `duration_s` or `max_requests`, whichever comes first, and wait for what is
in flight (up to a grace period, then those count as timeouts).

The client is aiohttp's (its HTTP parser is compiled): the load generator shares the machine
with the server it measures, and httpx's pure-Python HTTP/1.1 costs nearly three times its
CPU a request (0.85 against 0.31 ms at concurrency 1 on a 2-core machine: benchmarks/
client_bench.py), which showed up as latency at concurrency 1 and as cores taken from the
server under load."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import orjson

CLIENT_ERROR = -1
"""The code recorded when no HTTP answer came (connection refused, reset, timeout)."""
MAX_OUTSTANDING = 10_000


@dataclass(frozen=True)
class Sample:
    latency_s: float
    status: int
    code: int
    """inferd's error code from the body (0 on success), or CLIENT_ERROR."""
    tokens: int = 0
    """Generated tokens (`usage.completion_tokens`) of an answered generation request."""
    done_s: float = 0.0
    """When the answer (or the failure) came, in seconds since the step began."""


@dataclass
class LoadRun:
    samples: list[Sample]
    elapsed_s: float
    dropped: int = 0
    """Open loop only: arrivals not sent because the client had MAX_OUTSTANDING in flight."""
    sending_s: float = 0.0
    """When the step sent its last request, in seconds since it began: what came after was
    the drain (the load falling away as what was in flight was answered)."""


Tick = Callable[[int], None]


def completion_tokens(content: bytes) -> int:
    """`usage.completion_tokens` of a generation answer (0 when it has none)."""
    try:
        usage = orjson.loads(content).get("usage") or {}
        return int(usage.get("completion_tokens", 0))
    except (ValueError, AttributeError, TypeError):
        return 0


def counts_tokens(path: str) -> bool:
    """Whether answers on `path` carry generated tokens worth counting (only they are parsed,
    so embedding answers cost the client nothing more)."""
    return path.endswith(("/generate", "/completions"))


HEADERS = {"content-type": "application/json"}


async def _send(
    http: aiohttp.ClientSession, target: str, body: bytes, started: float, origin: float
) -> Sample:
    """One request, timed from `started` (when it was sent, or due); `origin`: the step's
    beginning."""
    try:
        async with http.post(target, data=body, headers=HEADERS) as response:
            content = await response.read()
            status = response.status
    except (TimeoutError, aiohttp.ClientError):
        done = time.perf_counter()
        return Sample(done - started, 0, CLIENT_ERROR, done_s=done - origin)
    done = time.perf_counter()
    latency, done_s = done - started, done - origin
    code = 0
    if status == 200 and counts_tokens(target):
        return Sample(latency, 200, 0, completion_tokens(content), done_s)
    if status != 200:
        try:
            parsed = orjson.loads(content)
            error = parsed.get("error")  # OpenAI's shape (the /v1 routes) holds it inside
            code = int((error if isinstance(error, dict) else parsed).get("code", status))
        except (ValueError, AttributeError, TypeError):
            code = status
    return Sample(latency, status, code, done_s=done_s)


def client(connections: int, timeout_s: float) -> aiohttp.ClientSession:
    """A session of up to `connections` kept-alive connections; no compression asked for (the
    answers are what a client of the server would read)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        skip_auto_headers=("Accept-Encoding",),
    )


async def closed_loop(
    url: str,
    path: str,
    next_body: Callable[[], bytes],
    concurrency: int,
    duration_s: float,
    max_requests: int,
    tick: Tick | None = None,
    timeout_s: float = 60.0,
) -> LoadRun:
    samples: list[Sample] = []
    sent = 0
    target = url.rstrip("/") + path
    async with client(concurrency, timeout_s) as http:
        start = time.perf_counter()
        stop_at = start + duration_s
        last_sent = start

        async def worker() -> None:
            nonlocal sent, last_sent
            while sent < max_requests and (now := time.perf_counter()) < stop_at:
                sent += 1
                last_sent = now
                sample = await _send(http, target, next_body(), now, start)
                samples.append(sample)
                if tick is not None:
                    tick(len(samples))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return LoadRun(samples, elapsed, sending_s=last_sent - start)


async def open_loop(
    url: str,
    path: str,
    next_body: Callable[[], bytes],
    rate: float,
    duration_s: float,
    max_requests: int,
    seed: int = 0,
    tick: Tick | None = None,
    timeout_s: float = 60.0,
) -> LoadRun:
    rng = random.Random(seed)
    samples: list[Sample] = []
    tasks: set[asyncio.Task[None]] = set()
    dropped = 0
    target = url.rstrip("/") + path
    async with client(MAX_OUTSTANDING, timeout_s) as http:

        async def one(body: bytes, due: float) -> None:
            samples.append(await _send(http, target, body, due, start))
            if tick is not None:
                tick(len(samples))

        start = time.perf_counter()
        due = last_sent = start
        for _ in range(max_requests):
            due += rng.expovariate(rate)
            if due - start > duration_s:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(tasks) >= MAX_OUTSTANDING:
                dropped += 1
                continue
            task = asyncio.create_task(one(next_body(), due))
            last_sent = time.perf_counter()
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(set(tasks), timeout=timeout_s)
        elapsed = time.perf_counter() - start
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return LoadRun(samples, elapsed, dropped, last_sent - start)
