"""The two tests the rollout judge uses, pure functions over samples (numpy and the standard
library only): the Mann-Whitney U test (is one sample's distribution shifted above the
other's?) and Fisher's exact test (is one arm's share of failures above the other's?), both
one-sided, both exact enough for the sample sizes of an analysis window (a handful to 10^5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mann_whitney_greater(
    candidate: Sequence[float] | np.ndarray, stable: Sequence[float] | np.ndarray
) -> float:
    """The one-sided p-value of "the candidate's values tend to be larger": the normal
    approximation of U with the tie correction and a continuity correction (within 1e-3 of
    the exact value from about 20 values an arm). 1.0 when either arm is empty."""
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(stable, dtype=np.float64)
    n_a, n_b = a.size, b.size
    if n_a == 0 or n_b == 0:
        return 1.0
    pooled = np.concatenate([a, b])
    ranks, tie_term = _ranks(pooled)
    u = float(ranks[:n_a].sum()) - n_a * (n_a + 1) / 2
    n = n_a + n_b
    mean = n_a * n_b / 2
    variance = n_a * n_b / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 1.0  # every value equal: no evidence either way
    z = (u - mean - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _ranks(values: np.ndarray) -> tuple[np.ndarray, float]:
    """Average ranks (1-based) of `values`, and the sum of t^3 - t over the groups of ties."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    counts = ends - starts
    average = (starts + ends + 1) / 2  # the mean of ranks starts+1 .. ends
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(average, counts)
    tie_term = float(np.sum(counts.astype(np.float64) ** 3 - counts))
    return ranks, tie_term


def fisher_greater(
    candidate_failures: int, candidate_total: int, stable_failures: int, stable_total: int
) -> float:
    """The one-sided p-value of "the candidate fails a larger share": the chance, with the
    failures spread over both arms at random (the hypergeometric law), that the candidate
    gets at least the failures it got. 1.0 when either arm is empty or nothing failed."""
    n = candidate_total + stable_total
    failures = candidate_failures + stable_failures
    if candidate_total <= 0 or stable_total <= 0 or failures == 0:
        return 1.0
    top = min(failures, candidate_total)
    whole = _log_choose(n, candidate_total)
    terms = [
        _log_choose(failures, k) + _log_choose(n - failures, candidate_total - k) - whole
        for k in range(candidate_failures, top + 1)
    ]
    if not terms:
        return 0.0
    peak = max(terms)
    if peak == -math.inf:
        return 0.0
    return min(1.0, math.exp(peak) * sum(math.exp(t - peak) for t in terms))


def _log_choose(n: int, k: int) -> float:
    if k < 0 or k > n:
        return -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-quantile (0 to 1) of `values` (linear interpolation); 0.0 for none."""
    if len(values) == 0:
        return 0.0
    return float(np.quantile(np.asarray(values, dtype=np.float64), q))
