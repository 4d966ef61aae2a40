"""Generation load in the steady state: a closed loop keeps N requests in flight without end,
and the server's own counters tell what it made over a window (tokens: one per token in
`inferd_generation_time_to_first_token_seconds_count` + `..._inter_token_seconds_count`; decode
steps: `inferd_generation_step_seconds`/`_rows` of kind decode), so neither the warm-up nor
a drain (the last requests finishing with fewer in flight) is counted."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

TOKEN_COUNTS = re.compile(
    r"^inferd_generation_(?:time_to_first_token|inter_token)_seconds_count\{[^}]*\} ([0-9.e+]+)$",
    re.MULTILINE,
)
DECODE = re.compile(
    r'^inferd_generation_step_(seconds|rows)_(sum|count)\{[^}]*kind="decode"[^}]*\} ([0-9.e+]+)$',
    re.MULTILINE,
)


@dataclass(frozen=True)
class Load:
    tokens_per_s: float
    step_share: float
    """The window's time spent in decode steps (the runtime's calls), by the server's clock."""
    step_ms: float
    """A decode step's mean time."""
    rows: float
    """A decode step's mean rows."""


@dataclass(frozen=True)
class Counters:
    tokens: float
    step_s: float
    steps: float
    rows: float


def counters(url: str) -> Counters:
    """Tokens the server has generated so far, and its decode steps, by its own counters."""
    text = httpx.get(url + "/metrics", timeout=10).text
    decode: dict[tuple[str, str], float] = {}
    for kind, part, value in DECODE.findall(text):
        decode[(kind, part)] = decode.get((kind, part), 0.0) + float(value)
    return Counters(
        sum(float(v) for v in TOKEN_COUNTS.findall(text)),
        decode.get(("seconds", "sum"), 0.0),
        decode.get(("seconds", "count"), 0.0),
        decode.get(("rows", "sum"), 0.0),
    )


async def steady_load(
    url: str, concurrency: int, next_body: Callable[[], bytes], warm_s: float, window_s: float
) -> Load:
    """What the server makes while `concurrency` /generate requests stay in flight."""
    stop = False

    async def client(http: httpx.AsyncClient) -> None:
        while not stop:
            response = await http.post("/generate", content=next_body())
            response.raise_for_status()

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
        tasks = [asyncio.create_task(client(http)) for _ in range(concurrency)]
        await asyncio.sleep(warm_s)
        before, started = await asyncio.to_thread(counters, url), time.perf_counter()
        await asyncio.sleep(window_s)
        after, ended = await asyncio.to_thread(counters, url), time.perf_counter()
        stop = True
        await asyncio.gather(*tasks)
    steps = max(after.steps - before.steps, 1.0)
    return Load(
        (after.tokens - before.tokens) / (ended - started),
        (after.step_s - before.step_s) / (ended - started),
        (after.step_s - before.step_s) / steps * 1000,
        (after.rows - before.rows) / steps,
    )
