"""A decoder's ONNX interface as the scheduler drives it: which inputs carry the KV cache, its
shape, its layout, and the feeds for a prefill (a past of length 0) or a decode step (one token
a row).

Two layouts: *concatenated* (the past goes in, past + new comes out; an attention mask marks
each row's real positions) and *in place* (inferd.prep.inplace_decoder: a fixed buffer bound as
both past and present, each row's length given by `seqlens_k`).

A decoder exported by inferd gives the logits of each row's last real token only (`last_only`:
`logits [batch, 1, vocab]`; inferd.prep.decoder_export, inferd.prep.inplace_decoder), so a prefill's
next tokens are its logits' one position whatever its prompts' lengths.

A decoder exported by inferd also ranks its last position's logits (inferd.prep.ranked_logits):
`top_logits` and `top_ids` [batch, width], the width best, best first. A decode step whose rows
all draw within them asks for those instead of the logits (`ranked_names`), and, where the graph
draws too (inferd.prep.graph_draw: `draws`), for the drawn token alone (`next_ids`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inferd.runtime.kv_names import PAST, PRESENT, cache_names
from inferd.runtime.protocol import Array, TensorSpec

TOKENS, MASK, POSITIONS, LOGITS = "input_ids", "attention_mask", "position_ids", "logits"
SEQLENS, TOTAL = "seqlens_k", "total_sequence_length"
TOP_LOGITS, TOP_IDS = "top_logits", "top_ids"
DRAW_TEMPERATURE, DRAW_TOP_K = "draw_temperature", "draw_top_k"
DRAW_TOP_P, DRAW_UNIFORM = "draw_top_p", "draw_uniform"
DRAW_INPUTS = (DRAW_TEMPERATURE, DRAW_TOP_K, DRAW_TOP_P, DRAW_UNIFORM)
NEXT_IDS = "next_ids"
DRAW_BIAS = "draw_bias"
"""Added to the last position's logits before they are ranked ([rows or 1, vocab], float32):
0 for a token a row may take, -inf for one its constraint forbids."""


class DecoderShapeError(ValueError):
    """The model does not have the decoder interface inferd drives (see
    inferd.prep.decoder_export)."""


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    heads: int
    head_dim: int
    dtype: np.dtype
    past_names: tuple[str, ...]
    present_names: tuple[str, ...]
    inplace: bool = False
    top_width: int = 0
    """How many ranked candidates the model gives (`top_logits`, `top_ids`); 0: none."""
    draws: bool = False
    """Whether the graph also draws the next token from them (inferd.prep.graph_draw): its
    draw inputs are fed on every run (`idle_draw` where nothing is drawn)."""
    last_only: bool = False
    """Whether `logits` holds each row's last real token only (`[batch, 1, vocab]`), not every
    position of the step."""
    bias: int = 0
    """The vocabulary of the graph's `draw_bias` input, fed on every run (zeros where no row
    is constrained); 0: the graph has none, and constrained rows draw in Python."""

    @staticmethod
    def of(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> DecoderShape:
        names = {s.name: s for s in inputs}
        out_specs = {s.name: s for s in outputs}
        out_names = set(out_specs)
        inplace = SEQLENS in names
        wanted = (TOKENS, POSITIONS, SEQLENS, TOTAL) if inplace else (TOKENS, MASK, POSITIONS)
        missing = [n for n in wanted if n not in names]
        if missing or LOGITS not in out_names:
            raise DecoderShapeError(
                f"a text-generation model needs inputs {', '.join(wanted)} and the output "
                f"{LOGITS}; missing {missing or [LOGITS]}"
            )
        layers = 0
        while cache_names(layers + 1, PAST)[-1] in names:
            layers += 1
        if layers == 0:
            first = PAST.format(layer=0, kind="key")
            raise DecoderShapeError(f"no KV cache inputs named like {first}")
        past = cache_names(layers, PAST)
        present = cache_names(layers, PRESENT)
        if any(n not in out_names for n in present):
            raise DecoderShapeError(f"the model lacks the KV cache outputs {present}")
        spec = names[past[0]]
        if spec.rank != 4 or spec.shape[1] <= 0 or spec.shape[3] <= 0:
            raise DecoderShapeError(
                f"{past[0]} must be [batch, heads, past, head_dim] with fixed heads and head_dim"
            )
        dtype = np.dtype(np.float16) if spec.datatype == "FP16" else np.dtype(np.float32)
        heads, head_dim = spec.shape[1], spec.shape[3]
        ranked = {s.name: s for s in outputs if s.name in (TOP_LOGITS, TOP_IDS)}
        width = 0
        if len(ranked) == 2 and ranked[TOP_LOGITS].shape[-1:] == ranked[TOP_IDS].shape[-1:]:
            width = max(0, ranked[TOP_LOGITS].shape[-1])  # a fixed width, or none at all
        draws = width > 0 and NEXT_IDS in out_names and all(n in names for n in DRAW_INPUTS)
        logits = out_specs[LOGITS]
        last_only = logits.rank == 3 and logits.shape[1] == 1
        bias_spec = names.get(DRAW_BIAS)
        bias = bias_spec.shape[-1] if bias_spec is not None and bias_spec.rank == 2 else 0
        return DecoderShape(
            layers,
            heads,
            head_dim,
            dtype,
            tuple(past),
            tuple(present),
            inplace,
            width,
            draws,
            last_only,
            max(0, bias),
        )

    def empty_cache(self, rows: int, length: int = 0) -> list[Array]:
        return [
            np.zeros((rows, self.heads, length, self.head_dim), dtype=self.dtype)
            for _ in self.past_names
        ]

    @property
    def output_names(self) -> list[str]:
        return [LOGITS, *self.present_names]

    @property
    def ranked_names(self) -> list[str]:
        """A decode step's outputs when it draws from the ranked candidates."""
        return [TOP_LOGITS, TOP_IDS, *self.present_names]

    def idle_draw(self, feeds: dict[str, Array]) -> dict[str, Array]:
        """`feeds` with the draw inputs a drawing graph needs on every run (greedy: the output
        unused unless the caller sets them); unchanged for any other graph."""
        if self.draws:
            feeds.update(idle_draw_feeds(feeds[TOKENS].shape[0], self.top_width))
        if self.bias:
            feeds[DRAW_BIAS] = idle_bias(self.bias)
        return feeds


def idle_draw_feeds(rows: int, width: int) -> dict[str, Array]:
    """The draw inputs of a graph that draws (inferd.prep.graph_draw), for a run that draws
    nothing: greedy rows."""
    return {
        DRAW_TEMPERATURE: np.zeros(rows, np.float64),
        DRAW_TOP_K: np.full(rows, max(width, 1), np.int64),
        DRAW_TOP_P: np.ones(rows, np.float64),
        DRAW_UNIFORM: np.zeros(rows, np.float64),
    }


def idle_bias(vocab: int) -> Array:
    """The `draw_bias` of a run where no row is constrained: zeros, one row for all."""
    return np.zeros((1, vocab), np.float32)


def prefill_feeds(
    shape: DecoderShape, prompts: Sequence[Sequence[int]], pad_id: int
) -> dict[str, Array]:
    """Prompts left-padded to the longest (so every row's last position is a real token)."""
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(prompts), width), dtype=np.int64)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    feeds: dict[str, Array] = {TOKENS: ids, MASK: mask, POSITIONS: positions}
    feeds.update(zip(shape.past_names, shape.empty_cache(len(prompts)), strict=True))
    return shape.idle_draw(feeds)


def decode_feeds(
    shape: DecoderShape, tokens: Array, positions: Array, mask: Array, cache: Sequence[Array]
) -> dict[str, Array]:
    """One new token per row at its own position; the mask covers the cache plus that token."""
    rows = tokens.shape[0]
    feeds: dict[str, Array] = {
        TOKENS: tokens.reshape(rows, 1).astype(np.int64),
        MASK: np.concatenate([mask, np.ones((rows, 1), dtype=np.int64)], axis=1),
        POSITIONS: positions.reshape(rows, 1).astype(np.int64),
    }
    feeds.update(zip(shape.past_names, cache, strict=True))
    return shape.idle_draw(feeds)
