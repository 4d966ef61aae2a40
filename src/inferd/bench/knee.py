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


def past_knee(
    throughput: Sequence[float],
    p99: Sequence[float],
    p99_rise: float = P99_RISE,
    gain: float = GAIN,
) -> bool:
    """Whether the sweep so far has passed its knee (to stop it early)."""
    return len(throughput) >= 2 and find_knee(throughput, p99, p99_rise, gain).found
