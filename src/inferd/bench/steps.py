"""One load step's result: throughput, latency percentiles, errors by code, and the server's
view of the same step."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from inferd.bench.load import LoadRun
from inferd.bench.scrape import ServerView


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

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Step:
        server = data.get("server")
        return Step(**{**data, "server": ServerView(**server) if server else None})


def summarize(
    mode: str, level: float, run: LoadRun, items_per_request: int, server: ServerView | None
) -> Step:
    ok = [s.latency_s for s in run.samples if s.status == 200]
    errors = Counter(str(s.code) for s in run.samples if s.status != 200)
    qs = np.percentile(np.array(ok) * 1000, [50, 90, 95, 99, 100]) if ok else [float("nan")] * 5
    elapsed = max(run.elapsed_s, 1e-9)
    return Step(
        mode=mode,
        level=level,
        requests=len(run.samples),
        ok=len(ok),
        elapsed_s=run.elapsed_s,
        requests_per_s=len(ok) / elapsed,
        items_per_s=len(ok) * items_per_request / elapsed,
        p50_ms=float(qs[0]),
        p90_ms=float(qs[1]),
        p95_ms=float(qs[2]),
        p99_ms=float(qs[3]),
        max_ms=float(qs[4]),
        errors=dict(errors),
        dropped=run.dropped,
        server=server,
        tokens_per_s=sum(s.tokens for s in run.samples) / elapsed,
    )
