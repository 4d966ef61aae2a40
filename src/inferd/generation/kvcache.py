"""The running batch's KV cache for a concatenating decoder: one array per layer and kind,
[rows, heads, length, head_dim], left-padded so that every row's newest token sits in the last
column, with a mask that marks each row's real positions.

Rows are slots: a new sequence takes the slot of a finished one (only its own rows are
written), so the batch is not copied whenever a sequence joins or leaves. It is copied only
to grow (more rows, or a prompt longer than the cache), and to compact when half of it has
become free rows or a quarter of it leading columns that no live row needs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inferd.generation.decoder import LOGITS, MASK, DecoderShape, decode_feeds, prefill_feeds
from inferd.generation.kvstore import Step
from inferd.runtime.protocol import Array


class KVBatch:
    def __init__(self) -> None:
        self.cache: list[Array] = []
        self.mask: Array = np.zeros((0, 0), dtype=np.int64)

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    @property
    def length(self) -> int:
        return int(self.mask.shape[1])

    @property
    def padded_tokens(self) -> int:
        """What the cache holds, padding and free rows included: rows x length."""
        return self.rows * self.length

    def place(self, slots: Sequence[int], cache: Sequence[Array], mask: Array) -> None:
        """Writes prefilled rows (cache [n, heads, p, head_dim], mask [n, p]) into `slots`:
        existing rows (reused) or the next new ones (appended)."""
        width = int(mask.shape[1])
        if not self.cache:  # the first rows: the arrays take the model's heads and dtype
            self.cache = [
                np.zeros((self.rows, a.shape[1], self.length, a.shape[3]), a.dtype) for a in cache
            ]
        rows = max(self.rows, max(slots) + 1)
        if rows > self.rows or width > self.length:
            self._resize(list(range(self.rows)), rows, max(self.length, width))
        length = self.length
        for i, slot in enumerate(slots):
            self.mask[slot] = 0
            self.mask[slot, length - width :] = mask[i]
            for k, array in enumerate(self.cache):
                array[slot, :, length - width :] = cache[k][i]

    def fork(self, source: int, target: int) -> None:
        """Row `target` (an existing one, or the next new one) becomes a copy of `source`."""
        if target >= self.rows:
            self._resize(list(range(self.rows)), target + 1, self.length)
        self.mask[target] = self.mask[source]
        for array in self.cache:
            array[target] = array[source]

    def advance(self, cache: Sequence[Array], mask: Array) -> None:
        """After a decode step: the model's present cache and the step's mask (the old one
        with a column for the new token), one column longer."""
        self.cache, self.mask = list(cache), mask

    def unused_columns(self, live: Sequence[int]) -> int:
        """Leading columns that none of the `live` rows uses."""
        if not live or self.length == 0:
            return self.length
        used = self.mask[list(live)].any(axis=0)
        return int(np.argmax(used)) if used.any() else self.length

    def keep(self, rows: Sequence[int]) -> None:
        """Only these rows, in this order; the leading columns none of them uses are cut."""
        rows = list(rows)
        first = self.unused_columns(rows)
        self._resize(rows, len(rows), self.length - first)

    def _resize(self, keep: list[int], rows: int, length: int) -> None:
        """One copy: the `keep` rows first (right-aligned in `length` columns), free rows after."""
        if rows == 0 or length == 0:
            self.cache, self.mask = [], np.zeros((rows, 0), dtype=np.int64)
            return
        old = min(self.length, length)
        mask = np.zeros((rows, length), dtype=np.int64)
        if keep:
            mask[: len(keep), length - old :] = self.mask[keep, self.length - old :]
        cache = []
        for array in self.cache:
            out = np.zeros((rows, array.shape[1], length, array.shape[3]), dtype=array.dtype)
            for i, row in enumerate(keep):
                out[i, :, length - old :] = array[row, :, array.shape[2] - old :]
            cache.append(out)
        self.cache, self.mask = cache, mask


class PaddedKV:
    """The KV store of a concatenating decoder: each step copies the cache (past + new), and
    attends over the batch's longest row. Compaction is lazy (`KVBatch` above)."""

    def __init__(self, shape: DecoderShape) -> None:
        self._shape = shape
        self.batch = KVBatch()

    @property
    def rows(self) -> int:
        return self.batch.rows

    @property
    def held_tokens(self) -> int:
        return self.batch.padded_tokens

    def footprint(self, rows: int, longest_prompt: int) -> int:
        return rows * (max(self.batch.length, longest_prompt) + 1)

    def prefill(self, prompts: Sequence[Sequence[int]], slots: Sequence[int], pad_id: int) -> Step:
        # left-padded: every prompt ends at the last position
        feeds = prefill_feeds(self._shape, prompts, pad_id)
        return Step(feeds, slots=tuple(slots), last_aligned=True)

    def take_prefill(self, step: Step, out: dict[str, Array]) -> None:
        self.batch.place(step.slots, [out[n] for n in self._shape.present_names], step.feeds[MASK])

    def after_prefill(self, step: Step, out: dict[str, Array]) -> Array:
        self.take_prefill(step, out)
        return out[LOGITS][:, -1, :]

    def fork(self, source: int, target: int, length: int) -> None:
        self.batch.fork(source, target)

    def decode(self, tokens: Array, positions: Array) -> Step:
        batch = self.batch
        return Step(decode_feeds(self._shape, tokens, positions, batch.mask, batch.cache))

    def after_decode(self, step: Step, out: dict[str, Array]) -> None:
        self.batch.advance([out[n] for n in self._shape.present_names], step.feeds[MASK])

    @property
    def advances(self) -> bool:
        return False  # the cache grows by a column a step: each step's feeds are new

    def drawn(self, step: Step) -> Array:
        raise NotImplementedError("a concatenating cache's steps do not draw in place")

    def advance(self, step: Step) -> None:
        raise NotImplementedError("a concatenating cache's steps are not run back to back")

    def extend(self, row: int, tokens: Sequence[int]) -> Step:
        raise NotImplementedError("a concatenating cache does not take a row's tokens alone")

    def after_extend(self, step: Step) -> None:
        raise NotImplementedError("a concatenating cache does not take a row's tokens alone")

    def compact(self, live: list[int]) -> list[int] | None:
        """When half of the rows are free, or a quarter of the columns unused (at least 16)."""
        batch = self.batch
        wasted = batch.unused_columns(live)
        if 2 * len(live) <= batch.rows or wasted >= max(16, batch.length // 4):
            batch.keep(live)
            return live
        return None

    def clear(self) -> None:
        self.batch = KVBatch()
