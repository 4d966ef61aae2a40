"""Model-quality drift: the population stability index (PSI) of a recent window of inputs (and
of top confidences, for classifiers) against a reference window.

The reference is the first `reference_size` observations a model sees, or samples from a file.
PSI = sum over bins of (recent - reference) * ln(recent / reference); over about 0.2 the
population has shifted. Crossing the threshold logs a warning once, and once more on recovery.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from inferd.observability.observer import Event, Observer, TextsServed

log = logging.getLogger(__name__)

EDGES = {
    "input_length": (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512),
    "top_confidence": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99),
}
EPSILON = 1e-4


@dataclass
class _Feature:
    edges: tuple[float, ...]
    reference_size: int
    window: int
    reference: list[int] = field(default_factory=list)
    reference_total: int = 0
    recent: deque[int] = field(default_factory=deque)
    recent_counts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        bins = len(self.edges) + 1
        self.reference = [0] * bins
        self.recent_counts = [0] * bins

    def bin(self, value: float) -> int:
        return bisect.bisect_right(self.edges, value)

    def seed(self, values: Iterable[float]) -> None:
        for value in values:
            self.reference[self.bin(value)] += 1
            self.reference_total += 1

    def add(self, value: float) -> None:
        index = self.bin(value)
        if self.reference_total < self.reference_size:
            self.reference[index] += 1
            self.reference_total += 1
            return
        self.recent.append(index)
        self.recent_counts[index] += 1
        if len(self.recent) > self.window:
            self.recent_counts[self.recent.popleft()] -= 1

    def psi(self) -> float | None:
        if self.reference_total < self.reference_size or len(self.recent) < self.window:
            return None
        total = 0.0
        n = len(self.recent)
        for ref, cur in zip(self.reference, self.recent_counts, strict=True):
            p = max(ref / self.reference_total, EPSILON)
            q = max(cur / n, EPSILON)
            total += (q - p) * math.log(q / p)
        return total


class DriftMonitor:
    """PSI per feature for one model."""

    def __init__(
        self,
        model: str,
        reference_size: int = 1000,
        window: int = 500,
        threshold: float = 0.2,
        reference: dict[str, Sequence[float]] | None = None,
    ) -> None:
        self.model = model
        self.threshold = threshold
        self._features = {
            name: _Feature(edges, reference_size, window) for name, edges in EDGES.items()
        }
        for name, values in (reference or {}).items():
            if name in self._features:
                feature = self._features[name]
                feature.seed(values)
                feature.reference_size = min(feature.reference_size, feature.reference_total)
        self._alerting: set[str] = set()

    def observe(
        self, lengths: Sequence[int], confidences: Sequence[float] | None = None
    ) -> dict[str, float]:
        """Adds observations; returns the PSI of every feature whose windows are full."""
        for n in lengths:
            self._features["input_length"].add(n)
        for score in confidences or ():
            self._features["top_confidence"].add(score)
        result = {}
        for name, feature in self._features.items():
            psi = feature.psi()
            if psi is None:
                continue
            result[name] = psi
            if psi > self.threshold and name not in self._alerting:
                self._alerting.add(name)
                log.warning(
                    "input drift over threshold",
                    extra={
                        "model": self.model,
                        "feature": name,
                        "psi": round(psi, 4),
                        "threshold": self.threshold,
                    },
                )
            elif psi <= self.threshold and name in self._alerting:
                self._alerting.discard(name)
                log.info(
                    "input drift back under threshold",
                    extra={"model": self.model, "feature": name, "psi": round(psi, 4)},
                )
        return result


class DriftObserver(Observer):
    """Drift as an observer of served texts: each model's monitor sees its texts (and top
    confidences), and every PSI it computes goes to `report(model, feature, psi)` (the metrics'
    gauge)."""

    def __init__(
        self, monitors: Mapping[str, DriftMonitor], report: Callable[[str, str, float], None]
    ) -> None:
        self._monitors = dict(monitors)
        self._report = report

    def observe(self, event: Event) -> None:
        if not isinstance(event, TextsServed):
            return
        monitor = self._monitors.get(event.model)
        if monitor is None:
            return
        for feature, psi in monitor.observe(event.token_counts, event.top_scores).items():
            self._report(event.model, feature, psi)
