"""The knee of a sweep: the first step after which p99 latency rises by more than
`p99_rise` (a fraction) while throughput rises by less than `gain`. The step before it is the
recommended operating point: the most throughput before latency pays for little more."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

P99_RISE = 0.5
GAIN = 0.1


@dataclass(frozen=True)
class Knee:
    index: int
    """The recommended step (the last one before the knee), an index into the steps."""
    found: bool
    """False when latency never turned: the sweep ended before the knee."""
    reason: str


def find_knee(
    throughput: Sequence[float],
    p99: Sequence[float],
    p99_rise: float = P99_RISE,
    gain: float = GAIN,
    levels: Sequence[float] | None = None,
) -> Knee:
    """`levels`: the load of each step (concurrency or arrival rate), named in the reason;
    default: the step numbers from 1."""
    if not throughput:
        raise ValueError("no steps")
    levels = levels or [float(i + 1) for i in range(len(throughput))]
    for i in range(1, len(throughput)):
        prev_t, prev_p = throughput[i - 1], p99[i - 1]
        if prev_t <= 0 or prev_p <= 0:
            continue
        t_gain = throughput[i] / prev_t - 1
        p_rise = p99[i] / prev_p - 1
        if p_rise > p99_rise and t_gain < gain:
            return Knee(
                i - 1,
                True,
                f"knee: from level {levels[i - 1]:g} to {levels[i]:g}, "
                f"p99 rose {p_rise:.0%} while throughput changed "
                f"{t_gain:+.0%} (thresholds: p99 +{p99_rise:.0%}, "
                f"throughput +{gain:.0%})",
            )
    best = max(range(len(throughput)), key=lambda i: throughput[i])
    return Knee(
        best,
        False,
        "no knee within the sweep: latency still paid off; the highest throughput step is reported",
    )


def within_budget(
    knee: Knee,
    throughput: Sequence[float],
    p99: Sequence[float],
    budget_ms: float | None,
    levels: Sequence[float] | None = None,
) -> Knee:
    """The recommended step under a p99 budget: the one with most throughput whose p99 is
    within `budget_ms`, at or before the knee (past it, more load buys little). Without a
    budget, the knee's step, and the reason says what was assumed: any p99 up to the knee."""
    levels = levels or [float(i + 1) for i in range(len(throughput))]
    if budget_ms is None:
        return Knee(
            knee.index,
            knee.found,
            f"{knee.reason}; no p99 budget given, so any p99 up to the knee was taken as "
            "acceptable: --p99-budget-ms picks the most throughput within one",
        )
    fits = [i for i in range(knee.index + 1) if 0 < p99[i] <= budget_ms]
    if not fits:
        lowest = min(range(len(p99)), key=lambda i: p99[i])
        return Knee(
            lowest,
            knee.found,
            f"no step met the p99 budget of {budget_ms:g} ms; the lowest p99 was "
            f"{p99[lowest]:.1f} ms at level {levels[lowest]:g}",
        )
    best = max(fits, key=lambda i: throughput[i])
    return Knee(
        best,
        knee.found,
        f"the most throughput with p99 within the budget of {budget_ms:g} ms, at or before "
        f"the knee ({knee.reason})",
    )


def past_knee(
    throughput: Sequence[float],
    p99: Sequence[float],
    p99_rise: float = P99_RISE,
    gain: float = GAIN,
) -> bool:
    """Whether the sweep so far has passed its knee (to stop it early)."""
    return len(throughput) >= 2 and find_knee(throughput, p99, p99_rise, gain).found
