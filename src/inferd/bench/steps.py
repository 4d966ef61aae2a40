"""One load step's result: throughput, latency percentiles, errors by code, and the server's
view of the same step.

The rates are the step's steady part's: the answers that came from `STEADY_FROM` of its
sending time to the end of it, over that span. A step's first answers wait for the load to
build up (a batching server answers its first batch only after running it) and once the
sending stops the load falls away while what is in flight is answered (the drain); neither is
the level's load, and where answers take seconds they are much of a short step (a 10 s step
whose answers take 4 s ends with up to 4 s of drain). With fewer than `MIN_STEADY` answers in
that part, the rates are over the whole step. Latency percentiles and error counts are over
every request of the step."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from inferd.bench.load import LoadRun, Sample
from inferd.bench.scrape import ServerView

STEADY_FROM = 0.25
"""The share of a step's sending time left out of its rates (the load building up)."""
MIN_STEADY = 20
"""Answers the steady part needs for its rates to be used."""


@dataclass(frozen=True)
class Step:
    mode: str  # "closed" (level: concurrency) or "open" (level: arrivals per second)
    level: float
    requests: int
    ok: int
    elapsed_s: float
    requests_per_s: float
    items_per_s: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    errors: dict[str, int]
    """Failed requests by inferd error code (-1: no HTTP answer)."""
    dropped: int
    server: ServerView | None
    tokens_per_s: float = 0.0
    """Generated tokens per second (generation endpoints; 0 elsewhere)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    mode: str, level: float, run: LoadRun, items_per_request: int, server: ServerView | None
) -> Step:
    ok = [s.latency_s for s in run.samples if s.status == 200]
    errors = Counter(str(s.code) for s in run.samples if s.status != 200)
    qs = np.percentile(np.array(ok) * 1000, [50, 90, 95, 99, 100]) if ok else [float("nan")] * 5
    answered, span = steady(run)
    return Step(
        mode=mode,
        level=level,
        requests=len(run.samples),
        ok=len(ok),
        elapsed_s=run.elapsed_s,
        requests_per_s=len(answered) / span,
        items_per_s=len(answered) * items_per_request / span,
        p50_ms=float(qs[0]),
        p90_ms=float(qs[1]),
        p95_ms=float(qs[2]),
        p99_ms=float(qs[3]),
        max_ms=float(qs[4]),
        errors=dict(errors),
        dropped=run.dropped,
        server=server,
        tokens_per_s=sum(s.tokens for s in answered) / span,
    )


def steady(run: LoadRun) -> tuple[list[Sample], float]:
    """The answered requests the rates count and the seconds they are over (the module's
    docstring). Only answers carry tokens."""
    answered = [s for s in run.samples if s.status == 200]
    begin, end = run.sending_s * STEADY_FROM, run.sending_s
    inside = [s for s in answered if begin <= s.done_s <= end]
    if end > begin and len(inside) >= MIN_STEADY:
        return inside, end - begin
    return answered, max(run.elapsed_s, 1e-9)
