"""The rollout judge: a pure function from two samples, the stable version's and the
candidate's, measured over the same window, to pass, fail or hold, with the reason in words.
No clock, no I/O, no state: the controller (inferd.engine.rollout.controller) calls it.

For each measure the judge asks two questions: is the difference one worth acting on (the
config's effect sizes: `max_error_rate_increase`, `max_latency_ratio` with
`latency_slack_ms` at p99 or at the median, `max_queue_increase_ms`), and is it evidence or
noise (a one-sided test at `significance`: Fisher's exact test on failures; for latency and
queue time the Mann-Whitney U test on the whole distribution and Fisher's test on the share
over the pooled 95th percentile, the tail, the smaller p-value of the two doubled). A
difference that is both fails the step; a failure rate over the allowed rise but not yet
significant holds it, and so does a latency or queue time worth acting on with a p-value
between `significance` and `HOLD_BELOW` (it may be real: more requests, then a look again);
anything else passes. Too few requests in either arm hold the step too: thin evidence never
rolls back.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inferd.config.model import RolloutConfig
from inferd.engine.rollout.statistics import (
    fisher_greater,
    mann_whitney_greater,
    quantile,
)

TAIL = 0.95
"""The pooled quantile above which a request counts as slow in the tail test."""
HOLD_BELOW = 0.05
"""A difference worth acting on with a p-value between `significance` and this holds the
step (it may be real: more requests will tell); above it, it is noise, and does not count."""
EARLY_SHARE = 0.1
"""A failure found before the window ends must clear this share of `significance` (the
controller looks every tick: more looks, a stricter level)."""


@dataclass(frozen=True)
class Sample:
    """One version's requests in one window: how many, how many failed, and their latencies
    and queue times in seconds (all of them, or a uniform subset)."""

    requests: int
    failures: int
    latencies_s: Sequence[float]
    queue_s: Sequence[float]

    @property
    def failure_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Shadowed:
    """The window's shadowed requests: how many were compared, their mean agreement (0-1)."""

    compared: int
    mean: float


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    HOLD = "hold"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str


def judge(
    stable: Sample,
    candidate: Sample,
    config: RolloutConfig,
    shadowed: Shadowed | None = None,
    stable_share: float = 1.0,
    queue_judged: bool = True,
    reference: str = "stable",
) -> Verdict:
    """The verdict on a window that has run its `analysis_window_s`. `stable_share`: the
    share of requests still routed to the stable version (with shadow traffic asked for, a
    step where it takes some holds until enough answers were compared). `queue_judged`:
    whether queue time is compared (not when the candidate takes a larger share of the
    traffic than the arm it is judged against: a version's queue grows with its share, not
    with what it does). `reference`: what the first sample is named in the reason (the
    stable version, or its baseline)."""
    early = judge_early(stable, candidate, config, shadowed, config.significance)
    if early is not None:
        return early
    need = config.min_requests
    if candidate.requests < need or stable.requests < need:
        return Verdict(
            Outcome.HOLD,
            f"not enough traffic to judge: {candidate.requests} candidate and "
            f"{stable.requests} {reference} requests, {need} needed in each",
        )
    holds: list[str] = []
    checks = (_failures, _latency, _queue) if queue_judged else (_failures, _latency)
    for check in checks:
        verdict = check(stable, candidate, config, config.significance)
        if verdict is not None and verdict.outcome is Outcome.FAIL:
            return verdict
        if verdict is not None:
            holds.append(verdict.reason)
    if holds:
        return Verdict(Outcome.HOLD, "; ".join(holds))
    if config.shadow_percent > 0 and stable_share > 0:
        compared = shadowed.compared if shadowed is not None else 0
        if compared < need:
            return Verdict(
                Outcome.HOLD,
                f"not enough shadowed requests to judge agreement: {compared} compared, "
                f"{need} needed",
            )
    return Verdict(Outcome.PASS, _summary(stable, candidate, reference))


def judge_early(
    stable: Sample,
    candidate: Sample,
    config: RolloutConfig,
    shadowed: Shadowed | None = None,
    significance: float | None = None,
) -> Verdict | None:
    """A failure clear before the window ends (failures, at a tenth of `significance` unless
    given; a mean agreement of shadowed answers under `min_agreement`), else None."""
    need = config.min_requests
    if shadowed is not None and shadowed.compared >= need and shadowed.mean < config.min_agreement:
        return Verdict(
            Outcome.FAIL,
            f"agreement {shadowed.mean:.1%} with the stable version over {shadowed.compared} "
            f"shadowed requests (at least {config.min_agreement:.0%} needed)",
        )
    if candidate.requests < need or stable.requests < need:
        return None
    level = config.significance * EARLY_SHARE if significance is None else significance
    verdict = _failures(stable, candidate, config, level)
    return verdict if verdict is not None and verdict.outcome is Outcome.FAIL else None


def _failures(
    stable: Sample, candidate: Sample, config: RolloutConfig, level: float
) -> Verdict | None:
    increase = candidate.failure_rate - stable.failure_rate
    if increase <= config.max_error_rate_increase:
        return None
    p = fisher_greater(candidate.failures, candidate.requests, stable.failures, stable.requests)
    said = (
        f"error rate {candidate.failure_rate:.1%} ({candidate.failures} of {candidate.requests}) "
        f"against {stable.failure_rate:.1%} ({stable.failures} of {stable.requests})"
    )
    if p < level:
        return Verdict(
            Outcome.FAIL,
            f"{said}: +{increase:.1%}, over the +{config.max_error_rate_increase:.1%} allowed, "
            f"p={p:.1g}",
        )
    # always a hold: a failure rate's estimate settles as requests come (a p99's may not,
    # on a noisy machine), and the stable version's failures are usually none
    return Verdict(Outcome.HOLD, f"{said}: higher, but not yet beyond noise (p={p:.2g})")


def _latency(
    stable: Sample, candidate: Sample, config: RolloutConfig, level: float
) -> Verdict | None:
    # at p99, and at the median: on shared cores a low share's tail is mostly waiting for a
    # core, which hides a slower model there; its median still shows it
    said = ""
    for q, name in ((0.99, "p99"), (0.5, "median")):
        ours, theirs = quantile(candidate.latencies_s, q), quantile(stable.latencies_s, q)
        if (
            ours > config.max_latency_ratio * theirs
            and (ours - theirs) * 1000 > config.latency_slack_ms
        ):
            said = f"{name} latency {ours * 1000:.1f} ms against {theirs * 1000:.1f} ms"
            break
    if not said:
        return None
    p = _shift_p(candidate.latencies_s, stable.latencies_s)
    if p < level:
        return Verdict(Outcome.FAIL, f"{said} (allowed x{config.max_latency_ratio:g}), p={p:.1g}")
    return _held(p, f"{said}: slower, but not yet beyond noise (p={p:.2g})")


def _queue(
    stable: Sample, candidate: Sample, config: RolloutConfig, level: float
) -> Verdict | None:
    ours, theirs = quantile(candidate.queue_s, 0.99), quantile(stable.queue_s, 0.99)
    if (ours - theirs) * 1000 <= config.max_queue_increase_ms:
        return None
    p = _shift_p(candidate.queue_s, stable.queue_s)
    said = f"p99 queue time {ours * 1000:.1f} ms against {theirs * 1000:.1f} ms"
    if p < level:
        return Verdict(
            Outcome.FAIL, f"{said} (allowed +{config.max_queue_increase_ms:g} ms), p={p:.1g}"
        )
    return _held(p, f"{said}: longer, but not yet beyond noise (p={p:.2g})")


def _held(p: float, reason: str) -> Verdict | None:
    return Verdict(Outcome.HOLD, reason) if p < HOLD_BELOW else None


def _shift_p(candidate: Sequence[float], stable: Sequence[float]) -> float:
    """The evidence that the candidate's values are larger: the smaller p-value of the
    Mann-Whitney U test and of Fisher's test on the share over the pooled 95th percentile,
    doubled (two tests, one level)."""
    ours = np.asarray(candidate, dtype=np.float64)
    theirs = np.asarray(stable, dtype=np.float64)
    whole = mann_whitney_greater(ours, theirs)
    line = float(np.quantile(np.concatenate([ours, theirs]), TAIL))
    over_c, over_s = int(np.count_nonzero(ours > line)), int(np.count_nonzero(theirs > line))
    tail = fisher_greater(over_c, ours.size, over_s, theirs.size)
    return min(1.0, 2 * min(whole, tail))


def _summary(stable: Sample, candidate: Sample, reference: str = "stable") -> str:
    return (
        f"candidate {candidate.requests} requests, {candidate.failure_rate:.1%} errors, p99 "
        f"{quantile(candidate.latencies_s, 0.99) * 1000:.1f} ms; {reference} {stable.requests} "
        f"requests, {stable.failure_rate:.1%} errors, p99 "
        f"{quantile(stable.latencies_s, 0.99) * 1000:.1f} ms"
    )
