"""Generation load in the steady state: a closed loop keeps N requests in flight without end,
and the server's own counters tell what it made over a window (tokens: one per token in
`inferd_generation_time_to_first_token_seconds_count` + `..._inter_token_seconds_count`; decode
steps: `inferd_generation_step_seconds`/`_rows` of kind decode), so neither the warm-up nor
a drain (the last requests finishing with fewer in flight) is counted."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from urllib.parse import urlparse

import httpx

from overload_bench import closed_loop, request_bytes, run_loop

TOKEN_COUNTS = re.compile(
    r"^inferd_generation_(?:time_to_first_token|inter_token)_seconds_count\{[^}]*\} ([0-9.e+]+)$",
    re.MULTILINE,
)
FIRST_TOKENS = re.compile(
    r"^inferd_generation_time_to_first_token_seconds_count\{[^}]*\} ([0-9.e+]+)$", re.MULTILINE
)
STEPS = re.compile(
    r"^inferd_generation_step_(seconds|rows)_(sum|count)"
    r'\{[^}]*kind="(decode|prefill)"[^}]*\} ([0-9.e+]+)$',
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
    prefill_share: float = 0.0
    """The window's time spent in prefills (the runtime's calls), by the server's clock."""
    prefill_ms: float = 0.0
    """A prefill's mean time."""
    requests_per_s: float = 0.0
    """Generations that got their first token, a second."""


@dataclass(frozen=True)
class Counters:
    tokens: float
    step_s: float
    steps: float
    rows: float
    prefill_s: float = 0.0
    prefills: float = 0.0
    firsts: float = 0.0


def counters(url: str) -> Counters:
    """Tokens the server has generated so far, and its decode steps, by its own counters."""
    text = httpx.get(url + "/metrics", timeout=10).text
    seen: dict[tuple[str, str, str], float] = {}
    for metric, part, kind, value in STEPS.findall(text):
        key = (metric, part, kind)
        seen[key] = seen.get(key, 0.0) + float(value)
    return Counters(
        sum(float(v) for v in TOKEN_COUNTS.findall(text)),
        seen.get(("seconds", "sum", "decode"), 0.0),
        seen.get(("seconds", "count", "decode"), 0.0),
        seen.get(("rows", "sum", "decode"), 0.0),
        seen.get(("seconds", "sum", "prefill"), 0.0),
        seen.get(("seconds", "count", "prefill"), 0.0),
        sum(float(v) for v in FIRST_TOKENS.findall(text)),
    )


def steady_load(
    url: str, concurrency: int, bodies: list[bytes], warm_s: float, window_s: float
) -> Load:
    """What the server makes while `concurrency` /generate requests (`bodies` in turn) stay in
    flight. The client is the raw asyncio HTTP/1.1 one of overload_bench (uvloop): it takes a
    sixth of the CPU an httpx client takes (2% of a core against 12% here), which on two
    shared cores would otherwise be taken from the server's steps."""
    address = urlparse(url)
    payloads = [request_bytes(address.netloc, body, "/generate") for body in bodies]

    async def run() -> tuple[Counters, float, Counters, float]:
        async def window() -> tuple[Counters, float, Counters, float]:
            await asyncio.sleep(warm_s)
            before, started = await asyncio.to_thread(counters, url), time.perf_counter()
            await asyncio.sleep(window_s)
            return before, started, await asyncio.to_thread(counters, url), time.perf_counter()

        counted = asyncio.ensure_future(window())
        host, port = address.hostname or "127.0.0.1", address.port or 80
        tally = await closed_loop(host, port, payloads, concurrency, warm_s + window_s + 0.5, 300)
        failed = [o.status for o in tally.outcomes if o.status != 200]
        if failed or tally.lost:
            raise RuntimeError(f"generation failed under load: {failed[:5]}, {tally.lost} lost")
        return await counted

    before, started, after, ended = run_loop(run())  # type: ignore[arg-type]
    steps = max(after.steps - before.steps, 1.0)
    prefills = max(after.prefills - before.prefills, 1.0)
    return Load(
        (after.tokens - before.tokens) / (ended - started),
        (after.step_s - before.step_s) / (ended - started),
        (after.step_s - before.step_s) / steps * 1000,
        (after.rows - before.rows) / steps,
        (after.prefill_s - before.prefill_s) / (ended - started),
        (after.prefill_s - before.prefill_s) / prefills * 1000,
        (after.firsts - before.firsts) / (ended - started),
    )
