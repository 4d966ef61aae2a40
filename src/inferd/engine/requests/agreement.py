"""How far two versions' answers to the same request agree, as one number in [0, 1] per
request (shadow traffic in a rollout): the share of texts given the same top label, the mean
cosine of the embeddings, the share of places a reranking orders alike, the share of greedy
generated tokens that match, or whether every output tensor is within a tolerance."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from inferd.engine.kinds.servable import Classified, Embeddings, Reranked
from inferd.runtime.protocol import Array


def labels(stable: Classified, candidate: Classified) -> float:
    same = [
        a.labels[0] == b.labels[0]
        for a, b in zip(stable.predictions, candidate.predictions, strict=True)
    ]
    return float(np.mean(same)) if same else 1.0


def embeddings(stable: Embeddings, candidate: Embeddings) -> float:
    a = np.asarray(stable.vectors, dtype=np.float64)
    b = np.asarray(candidate.vectors, dtype=np.float64)
    if a.shape != b.shape:
        return 0.0
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosine = np.sum(a * b, axis=1) / np.where(norms == 0, 1.0, norms)
    return float(np.clip(cosine.mean(), 0.0, 1.0)) if len(cosine) else 1.0


def rankings(stable: Reranked, candidate: Reranked) -> float:
    """Reranked texts: the share of places of the order by score where both put the same
    text."""
    a = np.argsort(-np.asarray(stable.scores, dtype=np.float64), kind="stable")
    b = np.argsort(-np.asarray(candidate.scores, dtype=np.float64), kind="stable")
    if a.shape != b.shape:
        return 0.0
    return float(np.mean(a == b)) if len(a) else 1.0


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
