"""Choosing the next token of every running sequence at once: repetition penalty, temperature,
top-k, top-p, then a draw from each sequence's own random generator, or the most likely token
when greedy. Vectorized over the batch, and batch-invariant: a row's token depends only on its
own logits, parameters and generator, never on what else is in the batch (candidates are
ordered by score, then token id; cumulative sums, not pairwise ones, decide the draw), so a
seed gives the same text alone or in a crowd.

With top-k set, the work after the cut is done on the k best candidates, not the vocabulary;
the cut itself runs on the model's float32 logits (the same order as in float64: the widening is
exact), and only the candidates are widened for the softmax."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from inferd.generation.params import SamplingParams
from inferd.runtime.protocol import Array

Floats = np.ndarray[Any, np.dtype[np.floating[Any]]]


def apply_repetition_penalty(logits: Floats, seen: Collection[int], penalty: float) -> Floats:
    """The CTRL rule (as Hugging Face applies it): a seen token's positive logit is divided by
    the penalty, a negative one multiplied, so it becomes less likely either way."""
    if penalty == 1.0 or not seen:
        return logits
    ids = np.fromiter(seen, dtype=np.int64)
    out = logits.copy()
    values = out[ids]
    out[ids] = np.where(values > 0, values / penalty, values * penalty)
    return out


def sample_batch(
    logits: Array,
    params: Sequence[SamplingParams],
    rngs: Sequence[np.random.Generator],
    seen: Sequence[Collection[int]],
) -> list[int]:
    """One token per row of `logits` [rows, vocab]."""
    rows, _vocab = logits.shape
    scores: Floats = np.asarray(logits, dtype=np.float32)
    penalized = [r for r, p in enumerate(params) if p.repetition_penalty != 1.0]
    if penalized:
        scores = scores.copy()  # the model's output stays as it came
        for r in penalized:
            scores[r] = apply_repetition_penalty(scores[r], seen[r], params[r].repetition_penalty)
    out = np.zeros(rows, dtype=np.int64)
    greedy = [r for r, p in enumerate(params) if p.greedy]
    if greedy:
        out[greedy] = np.argmax(scores if len(greedy) == rows else scores[greedy], axis=1)
    drawn = [r for r, p in enumerate(params) if not p.greedy]
    if drawn:
        out[drawn] = _draw(
            scores if len(drawn) == rows else scores[drawn],
            [params[r] for r in drawn],
            [rngs[r] for r in drawn],
        )
    return out.tolist()


def _draw(scores: Floats, params: list[SamplingParams], rngs: list[np.random.Generator]) -> Array:
    n, vocab = scores.shape
    ks = np.array([p.top_k if 0 < p.top_k < vocab else vocab for p in params])
    kmax = int(ks.max())
    if kmax < vocab:
        candidates = np.argpartition(scores, vocab - kmax, axis=1)[:, vocab - kmax :]
        candidates.sort(axis=1)  # by token id: a tie order that does not depend on kmax
    else:
        candidates = np.broadcast_to(np.arange(vocab), scores.shape)
    values = np.take_along_axis(scores, candidates, axis=1).astype(np.float64)
    order = np.argsort(-values, axis=1, kind="stable")
    values = np.take_along_axis(values, order, axis=1)
    candidates = np.take_along_axis(candidates, order, axis=1)
    columns = np.arange(kmax)[None, :]
    temperature = np.array([p.temperature for p in params])[:, None]
    weights = np.where(columns < ks[:, None], np.exp((values - values[:, :1]) / temperature), 0.0)
    cumulative = np.cumsum(weights, axis=1)
    index = np.arange(n)
    total = cumulative[index, ks - 1]
    top_p = np.array([p.top_p for p in params])
    # the smallest set of most likely tokens whose mass reaches top_p
    keep = np.minimum((cumulative < (top_p * total)[:, None]).sum(axis=1) + 1, ks)
    limit = cumulative[index, keep - 1]
    u = np.array([rng.random() for rng in rngs])
    pick = np.minimum((cumulative <= (u * limit)[:, None]).sum(axis=1), keep - 1)
    picked: Array = np.asarray(candidates[index, pick])
    return picked
