"""Batch formation as pure functions over lists: which queued items may share a batch.

An item's `key` says what must match exactly (input names, dtypes, every unpadded axis); its
`extent` gives the sizes of its padded axes. Items with equal keys may be merged, padded to the
largest extent, while the padded share of the batch stays under a bound.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from inferd.batching.layout import BatchLayout
from inferd.runtime.protocol import Feeds

Extent = tuple[tuple[int, ...], ...]
"""For each padded input (in layout order), the sizes of its padded axes."""


@dataclass(frozen=True)
class Signature:
    key: Hashable
    extent: Extent
    elements: int = field(init=False)
    """The padded inputs' elements at this extent (`_elements`), computed once: batch formation
    compares it for every candidate."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", _elements(self.extent))


def signature(feeds: Feeds, layout: BatchLayout) -> Signature:
    """What an item must share with others to be batched with them."""
    key_parts = []
    extent = []
    for name in sorted(feeds):
        array = feeds[name]
        axes = layout.padded_axes.get(name, ())
        shape = list(array.shape)
        if layout.batched:
            shape[0] = -1
        if axes and layout.mix_lengths:
            extent.append(tuple(array.shape[a] for a in axes))
            for a in axes:
                shape[a] = -1
        key_parts.append((name, array.dtype.str, tuple(shape)))
    return Signature(key=tuple(key_parts), extent=tuple(extent))


class Candidate(Protocol):
    @property
    def rows(self) -> int: ...

    @property
    def sig(self) -> Signature: ...


def split_rows(feeds: Feeds, rows: int, limit: int) -> list[tuple[Feeds, int]]:
    """A request of `rows` rows in parts of at most `limit` rows (whole when `limit` <= 0)."""
    if limit <= 0 or rows <= limit:
        return [(feeds, rows)]
    return [
        ({name: a[start : start + limit] for name, a in feeds.items()}, min(limit, rows - start))
        for start in range(0, rows, limit)
    ]


def max_extent(extents: Sequence[Extent]) -> Extent:
    return tuple(
        tuple(max(sizes) for sizes in zip(*axes, strict=True))
        for axes in zip(*extents, strict=True)
    )


def padding_counts(rows: Sequence[int], extents: Sequence[Extent]) -> tuple[int, int]:
    """(real elements, padded elements) over a batch's padded inputs; (0, 0) when nothing is
    padded."""
    if not extents or not extents[0]:
        return 0, 0
    padded_extent = max_extent(extents)
    padded = sum(rows) * sum(math.prod(axes) for axes in padded_extent)
    real = sum(
        r * sum(math.prod(axes) for axes in ext) for r, ext in zip(rows, extents, strict=True)
    )
    return real, padded


def padding_efficiency(rows: Sequence[int], extents: Sequence[Extent]) -> float:
    """Real elements / padded elements over the padded inputs (1.0 when nothing is padded)."""
    real, padded = padding_counts(rows, extents)
    return real / padded if padded else 1.0


def _elements(extent: Extent) -> int:
    return sum(math.prod(axes) for axes in extent)


def _widen(current: Extent, extent: Extent) -> Extent:
    return tuple(tuple(map(max, cur, new)) for cur, new in zip(current, extent, strict=True))


def token_cost(rows: int, extent: Extent) -> int:
    """A batch's cost in padded tokens: rows x the padded size of the first padded input."""
    return rows * (math.prod(extent[0]) if extent else 1)


DEEP_QUEUE_WASTE = 0.25
"""The share of `max_padding_waste` a batch may pad when the queue is deeper than one batch."""


def select_batch(
    candidates: Sequence[Candidate],
    max_rows: int,
    max_padding_waste: float,
    max_tokens: int | None = None,
    group_by_length: bool = False,
) -> list[int]:
    """Indices of the items that form the next batch; the first candidate (the oldest) is in.

    An item joins when its key matches the first one's, its rows fit under `max_rows`, the
    batch's padded tokens stay within `max_tokens`, and the padded share of the batch stays
    within `max_padding_waste`. Candidates are considered in arrival order, or, with
    `group_by_length`, nearest length to the oldest item first, so that a batch gathers items
    of similar length; then, when more rows of the batch's kind wait than it can take (a deep
    queue: the items left out will find partners of their own length), the padding bound is
    a quarter of `max_padding_waste`. `max_rows <= 0` means an unbatched model: one item per
    run.
    """
    if not candidates:
        return []
    head = candidates[0]
    if max_rows <= 0:
        return [0]
    key = head.sig.key
    head_size = head.sig.elements
    order: Sequence[int] = range(1, len(candidates))
    if group_by_length and head.sig.extent:
        order = sorted(order, key=lambda i: abs(candidates[i].sig.elements - head_size))
        waiting = sum(c.rows for c in candidates if c.sig.key == key)
        if waiting > max_rows:
            max_padding_waste *= DEEP_QUEUE_WASTE
    chosen = [0]
    total = head.rows
    widest, widest_size = head.sig.extent, head_size
    real = head.rows * head_size
    for index in order:
        if total >= max_rows:
            break
        item = candidates[index]
        sig = item.sig
        if sig.key != key or total + item.rows > max_rows:
            continue
        rows = total + item.rows
        if sig.extent == widest:
            trial_widest, trial_size = widest, widest_size
        else:
            trial_widest = _widen(widest, sig.extent)
            trial_size = _elements(trial_widest)
        if max_tokens is not None and token_cost(rows, trial_widest) > max_tokens:
            continue
        trial_real = real + item.rows * sig.elements
        padded = rows * trial_size
        if padded and 1.0 - trial_real / padded > max_padding_waste:
            continue
        chosen.append(index)
        total, widest, widest_size, real = rows, trial_widest, trial_size, trial_real
    return chosen
