"""The last few seconds of traffic per model, for the status page: requests and errors per
second and latency percentiles over a sliding window (the Prometheus histograms serve
dashboards; this serves a glance without one).

Every finished model request is recorded (time, duration, failed); a model keeps at most
`max_samples` of them, so a flood costs bounded memory (rates then count what was kept over
the time it spans, so they stay right).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LiveFigures:
    requests_per_s: float
    errors_per_s: float
    p50_ms: float | None
    p99_ms: float | None

    def as_dict(self) -> dict[str, float | None]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {
            "requests_per_s": round(self.requests_per_s, 2),
            "errors_per_s": round(self.errors_per_s, 2),
            "p50_ms": rounded(self.p50_ms),
            "p99_ms": rounded(self.p99_ms),
        }


class LiveWindow:
    def __init__(
        self,
        window_s: float = 10.0,
        max_samples: int = 20_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self._max = max_samples
        self._clock = clock
        self._started = clock()
        self._samples: dict[str, deque[tuple[float, float, bool]]] = {}
        self._last: float | None = None

    def idle_s(self) -> float:
        """Seconds since a request last finished (since the start, before any)."""
        return self._clock() - (self._started if self._last is None else self._last)

    def record(self, model: str, seconds: float, failed: bool) -> None:
        self._last = self._clock()
        samples = self._samples.get(model)
        if samples is None:
            samples = self._samples[model] = deque(maxlen=self._max)
        samples.append((self._clock(), seconds, failed))

    def figures(self) -> dict[str, LiveFigures]:
        now = self._clock()
        cutoff = now - self.window_s
        out = {}
        for model, samples in self._samples.items():
            while samples and samples[0][0] < cutoff:
                samples.popleft()
            out[model] = self._figures(samples, now)
        return out

    def _figures(self, samples: deque[tuple[float, float, bool]], now: float) -> LiveFigures:
        if not samples:
            return LiveFigures(0.0, 0.0, None, None)
        # the span the samples cover: the window, or less when the deque dropped the oldest
        # (a flood), or when the server has not run a whole window yet
        oldest = samples[0][0] if len(samples) == samples.maxlen else now - self.window_s
        span = max(now - max(oldest, self._started), 1e-3)
        durations = np.fromiter((s[1] for s in samples), np.float64, len(samples))
        failed = sum(1 for s in samples if s[2])
        p50, p99 = np.percentile(durations * 1000, [50, 99])
        return LiveFigures(len(samples) / span, failed / span, float(p50), float(p99))
