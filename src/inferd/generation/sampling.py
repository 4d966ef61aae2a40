"""Choosing the next token of every running sequence at once: repetition penalty, temperature,
top-k, top-p, then a draw from each sequence's own random generator, or the most likely token
when greedy. Vectorized over the batch, and batch-invariant: a row's token depends only on its
own logits, parameters and generator, never on what else is in the batch (candidates are
ordered by score, then token id; cumulative sums, not pairwise ones, decide the draw), so a
seed gives the same text alone or in a crowd.

With top-k set, the work after the cut is done on the k best candidates, not the vocabulary;
the cut itself runs on the model's float32 logits (the same order as in float64: the widening is
exact), and only the candidates are widened for the softmax. A decoder exported by inferd makes
the cut itself (inferd.prep.ranked_logits: ONNX Runtime's TopK on the last position, in the
same run): `sample_ranked` draws from its candidates, and gives the same token as
`sample_batch` on the full logits, because `top_candidates` orders them as the operator does
(by score, then by the lower token id, ties at the cut included)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from inferd.generation.decoder import DRAW_TEMPERATURE, DRAW_TOP_K, DRAW_TOP_P, DRAW_UNIFORM
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


def apply_penalties(
    logits: Floats, params: SamplingParams, seen: Collection[int], counts: Mapping[int, int]
) -> Floats:
    """A row's scores with its penalties: the repetition penalty over the tokens `seen`
    (prompt and answer), then OpenAI's presence and frequency penalties over the answer's
    tokens (`counts`: how often each came). A copy when one applies."""
    out = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    if counts and (params.presence_penalty or params.frequency_penalty):
        ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        times = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
        out = out.copy() if out is logits else out
        out[ids] -= params.presence_penalty + params.frequency_penalty * times
    return out


def sample_batch(
    logits: Array,
    params: Sequence[SamplingParams],
    rngs: Sequence[np.random.Generator],
    seen: Sequence[Collection[int]],
    counts: Sequence[Mapping[int, int]] = (),
) -> list[int]:
    """One token per row of `logits` [rows, vocab] (`counts`: each row's answer's tokens,
    for the presence and frequency penalties)."""
    rows, vocab = logits.shape
    scores: Floats = np.asarray(logits, dtype=np.float32)
    penalized = [r for r, p in enumerate(params) if p.penalized]
    if penalized:
        scores = scores.copy()  # the model's output stays as it came
        for r in penalized:
            scores[r] = apply_penalties(scores[r], params[r], seen[r], counts[r] if counts else {})
    out = np.zeros(rows, dtype=np.int64)
    greedy = [r for r, p in enumerate(params) if p.greedy]
    if greedy:
        out[greedy] = np.argmax(scores if len(greedy) == rows else scores[greedy], axis=1)
    drawn = [r for r, p in enumerate(params) if not p.greedy]
    if drawn:
        chosen = [params[r] for r in drawn]
        subset = scores if len(drawn) == rows else scores[drawn]
        values, ids = top_candidates(subset, _widest_cut(chosen, vocab))
        out[drawn] = _draw(values, ids, chosen, [rngs[r] for r in drawn], vocab)
    return out.tolist()


def sample_allowed(
    logits: Sequence[Array],
    allowed: Sequence[Array],
    params: Sequence[SamplingParams],
    rngs: Sequence[np.random.Generator],
    seen: Sequence[Collection[int]],
    counts: Sequence[Mapping[int, int]] = (),
) -> list[int]:
    """One token per row, drawn only among its `allowed` token ids (ascending; a constrained
    row's, inferd.generation.constraint): the same draw as `sample_batch` on logits where
    every other token is -inf, but over the allowed tokens alone, which are often a handful
    (and a partition over thousands of tied -inf scores is ten times slower than over
    distinct ones)."""
    out = [0] * len(logits)
    drawn: list[int] = []
    values: list[Array] = []
    ids: list[Array] = []
    for r, (row, tokens, p) in enumerate(zip(logits, allowed, params, strict=True)):
        scores: Floats = np.asarray(row, dtype=np.float32)
        if p.penalized:
            scores = apply_penalties(scores, p, seen[r], counts[r] if counts else {})
        scores = scores[tokens]
        if p.greedy:
            out[r] = int(tokens[int(np.argmax(scores))])  # (ties: the lowest id, as argmax)
            continue
        best, order = top_candidates(scores[None, :], _widest_cut([p], len(tokens)))
        drawn.append(r)
        values.append(best[0])
        ids.append(tokens[order[0]])
    if drawn:
        width = max(len(v) for v in values)
        padded_values = np.full((len(drawn), width), -np.inf, dtype=np.float32)
        padded_ids = np.zeros((len(drawn), width), dtype=np.int64)
        for i, (v, t) in enumerate(zip(values, ids, strict=True)):
            padded_values[i, : len(v)] = v  # (past its own: weight 0, never drawn)
            padded_ids[i, : len(t)] = t
        chosen = _draw(
            padded_values, padded_ids, [params[r] for r in drawn], [rngs[r] for r in drawn], None
        )
        for r, token in zip(drawn, chosen.tolist(), strict=True):
            out[r] = int(token)
    return out


def fits_ranked(params: SamplingParams, width: int) -> bool:
    """Whether a row's next token can be drawn from the model's `width` best candidates
    alone: greedy, or a top-k cut within them, without a penalty (which changes the scores
    before the cut), and without log-probabilities (which need the whole distribution)."""
    return (
        not params.penalized
        and params.logprobs is None
        and (params.greedy or 0 < params.top_k <= width)
    )


def sample_ranked(
    values: Array, ids: Array, params: Sequence[SamplingParams], rngs: Sequence[np.random.Generator]
) -> list[int]:
    """One token per row from its best candidates (`values`, `ids` [rows, width], best first,
    as ONNX Runtime's TopK gives them); every row must `fits_ranked`."""
    out: Array = np.array(ids[:, 0], dtype=np.int64)  # greedy: the best
    drawn = [r for r, p in enumerate(params) if not p.greedy]
    if drawn:
        chosen = [params[r] for r in drawn]
        kmax = _widest_cut(chosen, ids.shape[1])
        rows = slice(None) if len(drawn) == len(params) else drawn
        out[drawn] = _draw(
            values[rows, :kmax], ids[rows, :kmax], chosen, [rngs[r] for r in drawn], None
        )
    tokens: list[int] = out.tolist()
    return tokens


def draw_inputs(params: Sequence[SamplingParams], uniforms: Array, width: int) -> dict[str, Array]:
    """Each row's draw, as the graph takes it (inferd.prep.graph_draw) and `_draw` uses it:
    temperature (0: greedy), top-k cut among `width` candidates (all of them without one),
    top-p, and its uniform number (unused by a greedy row)."""
    n = len(params)
    return {
        DRAW_TEMPERATURE: np.fromiter((p.temperature for p in params), np.float64, n),
        DRAW_TOP_K: np.fromiter(
            (p.top_k if 0 < p.top_k < width else width for p in params), np.int64, n
        ),
        DRAW_TOP_P: np.fromiter((p.top_p for p in params), np.float64, n),
        DRAW_UNIFORM: np.array(uniforms, dtype=np.float64),
    }


def top_candidates(logits: Array, k: int) -> tuple[Array, Array]:
    """The `k` best of each row [rows, k], best first; equal scores by the lower token id,
    also where the cut falls among them (the order of ONNX Runtime's TopK)."""
    scores: Floats = np.asarray(logits, dtype=np.float32)
    rows, vocab = scores.shape
    if k < vocab:
        kth = np.partition(scores, vocab - k, axis=1)[:, vocab - k, None]
        above = scores > kth
        tied = scores == kth  # the lowest ids of these fill the cut
        room = k - above.sum(axis=1, keepdims=True)
        keep = above | (tied & (np.cumsum(tied, axis=1) <= room))
        if int(keep.sum()) == rows * k:
            ids = np.nonzero(keep)[1].reshape(rows, k)  # ascending ids in each row
        else:  # NaN scores (a broken model) compare to nothing: any k, by id
            ids = np.sort(np.argpartition(scores, vocab - k, axis=1)[:, vocab - k :], axis=1)
    else:
        ids = np.broadcast_to(np.arange(vocab), scores.shape)
    values = np.take_along_axis(scores, ids, axis=1)
    order = np.argsort(-values, axis=1, kind="stable")  # ties keep the lower id first
    return np.take_along_axis(values, order, axis=1), np.take_along_axis(ids, order, axis=1)


def _widest_cut(params: Sequence[SamplingParams], vocab: int) -> int:
    return max(p.top_k if 0 < p.top_k < vocab else vocab for p in params)


def _draw(
    values: Array,
    ids: Array,
    params: list[SamplingParams],
    rngs: list[np.random.Generator],
    vocab: int | None,
) -> Array:
    """The draw among each row's candidates (best first, as many as the widest cut): the
    row's own top-k within them, temperature, top-p, then its generator's next number."""
    n, kmax = ids.shape
    u = np.fromiter((rng.random() for rng in rngs), np.float64, n)
    rows = draw_inputs(params, u, vocab if vocab is not None else kmax)
    ks = np.asarray(rows[DRAW_TOP_K], dtype=np.int64)
    temperature: Floats = np.asarray(rows[DRAW_TEMPERATURE], dtype=np.float64)
    top_p: Floats = np.asarray(rows[DRAW_TOP_P], dtype=np.float64)
    scores = values.astype(np.float64)
    weights = np.exp((scores - scores[:, :1]) / temperature[:, None])
    if ks.min() < kmax:  # each row's own cut
        weights[np.arange(kmax)[None, :] >= ks[:, None]] = 0.0
    cumulative = np.cumsum(weights, axis=1)
    index = np.arange(n)
    total = cumulative[index, ks - 1]
    # the smallest set of most likely tokens whose mass reaches top_p
    keep = np.minimum((cumulative < (top_p * total)[:, None]).sum(axis=1) + 1, ks)
    limit = cumulative[index, keep - 1]
    pick = np.minimum((cumulative <= (u * limit)[:, None]).sum(axis=1), keep - 1)
    picked: Array = np.asarray(ids[index, pick])
    return picked
