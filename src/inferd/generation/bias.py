"""Constrained rows drawn in the graph: each row's mask (inferd.generation.constraint) as the
`draw_bias` the graph adds to its last logits before ranking them (0 for an allowed token,
-inf for a forbidden one), so that its candidates are its allowed tokens and the graph's own
draw (or Python's, from those candidates) keeps to the grammar. Within a block of steps the
rows take their drawn tokens into their grammars between the steps, and their next masks
become the next step's bias (`HeldRows.take`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.errors import InferdError, InternalError
from inferd.generation.decoder import DRAW_BIAS
from inferd.generation.sequence import Sequence as Seq
from inferd.runtime.protocol import Array

NO_TOKEN = InternalError(
    "the answer's grammar allows no token the model can draw (a tokenizer whose vocabulary is "
    "wider than the model's logits)"
)


BYTE_BIAS = np.where(
    np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little"),
    np.float32(0.0),
    np.float32(-np.inf),
)
"""Each byte of a mask as the bias of its 8 tokens: one lookup a byte, not a step a bit."""


def biases(masks: np.ndarray[Any, Any], vocab: int) -> np.ndarray[Any, Any]:
    """Masks `[rows, words]` (int32 words, a bit a token) as biases `[rows, vocab]`: 0 where
    a mask allows, -inf elsewhere (and past it)."""
    rows, words = masks.shape
    out = np.empty((rows, words * 4, 8), dtype=np.float32)
    np.take(BYTE_BIAS, masks.view(np.uint8), axis=0, out=out)
    flat = out.reshape(rows, words * 32)
    if flat.shape[1] >= vocab:
        return flat[:, :vocab]
    beyond = np.full((rows, vocab - flat.shape[1]), -np.inf, dtype=np.float32)
    return np.concatenate([flat, beyond], axis=1)


class HeldRows:
    """A step's (or a block's) constrained rows, by index in `rows`."""

    def __init__(self, rows: list[Seq], held: list[int], vocab: int) -> None:
        self._rows = rows
        self._held = held
        self._vocab = vocab
        self._ended: set[int] = set()
        self._broken: dict[int, InferdError] = {}

    def write(self, feeds: dict[str, Array]) -> None:
        """The rows' next masks into `feeds`' bias (zeros for every other row)."""
        target = feeds[DRAW_BIAS]
        if target.shape[0] != len(self._rows):  # (a store whose feeds are new each step)
            target = feeds[DRAW_BIAS] = np.zeros((len(self._rows), self._vocab), np.float32)
        else:
            target[...] = 0.0
        live = [r for r in self._held if r not in self._ended]
        if not live:
            return
        masks = np.stack([_mask(self._rows[r]) for r in live])
        bias = biases(masks, self._vocab)
        target[live] = bias
        within = masks if self._vocab >= masks.shape[1] * 32 else np.isfinite(bias)
        allowing: list[bool] = np.any(within, axis=1).tolist()
        for r, allows in zip(live, allowing, strict=True):
            if not allows:  # (no token of the model's is allowed)
                self._broken[r] = NO_TOKEN
                self._ended.add(r)

    def take(self, tokens: Array) -> None:
        """Within a block, after a step: each row takes its drawn token into its grammar (a
        row whose token ends it takes no more); when the block goes on, `write` makes the
        next masks the bias."""
        for r in self._held:
            if r in self._ended:
                continue
            constraint = self._rows[r].constraint
            assert constraint is not None
            token = int(tokens[r])
            if constraint.ends(token):
                self._ended.add(r)
                continue
            try:
                constraint.consume(token)
            except InferdError as error:  # (never, as the bias holds the draw: said if so)
                self._broken[r] = error
                self._ended.add(r)

    def settle(self) -> None:
        """Each row's grammar looks for the tokens it forces next (computing its mask, which
        it keeps for the next step)."""
        for r in self._held:
            constraint = self._rows[r].constraint
            if r not in self._ended and constraint is not None:
                constraint.settle()

    def fail_broken(self) -> None:
        """A row whose draw broke its grammar, or whose grammar allows none of the model's
        tokens, fails with the error (before its tokens are taken: none of them is)."""
        for r, error in self._broken.items():
            self._rows[r].fail(error)


def _mask(seq: Seq) -> np.ndarray[Any, Any]:
    constraint = seq.constraint
    assert constraint is not None
    return constraint.mask()
