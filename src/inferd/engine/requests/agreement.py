"""How far two versions' answers to the same request agree, as one number in [0, 1] per
request (shadow traffic in a rollout), for the answers the engine gives itself: the share of
greedy generated tokens that match, or whether every output tensor is within a tolerance.
Each task verb says how its own answers agree (inferd.verbs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from inferd.runtime.protocol import Array


def tokens(stable: Sequence[int], candidate: Sequence[int]) -> float:
    """Greedy generations: the tokens equal at the same position, over the longer one's
    length (two empty answers agree)."""
    longest = max(len(stable), len(candidate))
    if longest == 0:
        return 1.0
    return sum(a == b for a, b in zip(stable, candidate, strict=False)) / longest


def max_abs_diff(stable: Mapping[str, Array], candidate: Mapping[str, Array]) -> float:
    """The largest difference over the outputs both give (infinite when they differ in shape
    or in which outputs they give)."""
    if set(stable) != set(candidate):
        return float("inf")
    worst = 0.0
    for name, a in stable.items():
        b = candidate[name]
        if a.shape != b.shape:
            return float("inf")
        if a.size and np.issubdtype(a.dtype, np.number):
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            worst = max(worst, float(np.max(diff)))
        elif not np.array_equal(a, b):
            return float("inf")
    return worst


def tensors(stable: Mapping[str, Array], candidate: Mapping[str, Array], tolerance: float) -> float:
    return 1.0 if max_abs_diff(stable, candidate) <= tolerance else 0.0
