"""Whether a new version is worth writing: its speed against its source, timed until the
measurement is tight enough to trust, and its size.

Timing: the two runners take turns, in alternating order (A B, then B A), for at least
`min_rounds` rounds of one pass over the timing batches each; every round gives one speed-up
(source time / candidate time), so a machine whose speed drifts shifts both alike. The result is
the median speed-up with a 95% bootstrap interval; rounds are added (up to `max_rounds` or
`budget_s`) until the interval's half-width is within `tolerance` of the median.

Verdict: a candidate is *slower* when the whole interval lies below 1 (a measured loss, not
noise), and *larger* when its file exceeds the source's by more than `SIZE_SLACK` (metadata and
names account for a few bytes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.prep.console import Reporter
from inferd.prep.parity import Feeds, ParityReport, Runner

TIMING_S = 30.0
"""How long a speed comparison may take at most, by default (`--timing-s`)."""
SIZE_SLACK = 0.01
"""A candidate's file may exceed its source's by this fraction before it counts as larger."""


@dataclass(frozen=True)
class SpeedComparison:
    speedup: float
    """Median over rounds of source time / candidate time (above 1: the candidate is faster)."""
    low: float
    high: float
    """The 95% bootstrap interval of that median."""
    rounds: int
    batches: int
    source_s: float
    candidate_s: float
    """Median time of one pass over the timing batches."""

    @property
    def slower(self) -> bool:
        return self.high < 1.0

    @property
    def faster(self) -> bool:
        return self.low > 1.0

    def describe(self) -> str:
        return (
            f"{self.speedup:.2f}x (95% interval {self.low:.2f}-{self.high:.2f}; "
            f"{self.source_s * 1e3:.1f} ms -> {self.candidate_s * 1e3:.1f} ms a pass, median of "
            f"{self.rounds} rounds over {self.batches} batches)"
        )

    def to_dict(self) -> dict[str, float | int]:
        return {
            "speedup": self.speedup,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "batches": self.batches,
            "source_s": self.source_s,
            "candidate_s": self.candidate_s,
        }


def median_interval(ratios: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """The median of `ratios` and its 95% bootstrap interval."""
    values = np.asarray(ratios, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(values, size=(2000, len(values)), replace=True), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(np.median(values)), float(low), float(high)


def _pass(run: Runner, feeds: Sequence[Feeds], clock: Callable[[], float]) -> float:
    start = clock()
    for f in feeds:
        run(f)
    return clock() - start


def compare_speed(
    source: Runner,
    candidate: Runner,
    feeds: Sequence[Feeds],
    *,
    min_rounds: int = 15,
    max_rounds: int = 120,
    budget_s: float | None = None,
    tolerance: float = 0.02,
    clock: Callable[[], float] = time.perf_counter,
) -> SpeedComparison:
    """Times `source` and `candidate` on `feeds` in alternating rounds until the median
    ratio's interval is within `tolerance`, or `max_rounds` or `budget_s` (by `clock`, seconds)
    is reached."""
    if not feeds:
        raise ValueError("no timing batches")
    budget = TIMING_S if budget_s is None else budget_s
    for run in (source, candidate):  # warm-up: first runs allocate
        _pass(run, feeds, clock)
    started = clock()
    source_times: list[float] = []
    candidate_times: list[float] = []
    while True:
        if len(source_times) % 2 == 0:
            a = _pass(source, feeds, clock)
            b = _pass(candidate, feeds, clock)
        else:
            b = _pass(candidate, feeds, clock)
            a = _pass(source, feeds, clock)
        source_times.append(a)
        candidate_times.append(b)
        rounds = len(source_times)
        if rounds < min_rounds:
            continue
        ratios = [s / c for s, c in zip(source_times, candidate_times, strict=True)]
        speedup, low, high = median_interval(ratios)
        tight = (high - low) / 2 <= tolerance * speedup
        if tight or rounds >= max_rounds or clock() - started > budget:
            return SpeedComparison(
                speedup,
                low,
                high,
                rounds,
                len(feeds),
                float(np.median(source_times)),
                float(np.median(candidate_times)),
            )


def refusals(
    size_ratio: float, speed: SpeedComparison | None, what: str = "the source version"
) -> list[str]:
    """Why the candidate is worse than its source (empty when it is not). `speed` None: speed
    is not judged (fp16 measured on a CPU says nothing of its speed on a GPU)."""
    problems = []
    if speed is not None and speed.slower:
        problems.append(f"slower than {what}: {speed.describe()}")
    if size_ratio > 1.0 + SIZE_SLACK:
        problems.append(f"larger than {what}: {size_ratio:.2f}x its file size")
    return problems


def refuse_parity(reporter: Reporter, parity: ParityReport, report: Path) -> bool:
    """Says where the new version's outputs are off; True when they are (it is not written,
    whatever `--force` says)."""
    if parity.ok:
        return False
    for line in parity.failures():
        reporter.fail(line)
    reporter.fail(f"parity check failed; nothing written (report: {report})")
    return True


def refuse(reporter: Reporter, problems: Sequence[str], force: bool, report: Path) -> bool:
    """Says, in one line, why the new version is worse; True when it must not be written (no
    `--force`). With `--force` it is written and each problem is noted."""
    if not problems:
        return False
    if force:
        for line in problems:
            reporter.note(f"written despite: {line} (--force)")
        return False
    reporter.fail(
        f"nothing written: {'; '.join(problems)} (--force writes it anyway; report: {report})"
    )
    return True
