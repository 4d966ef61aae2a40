"""Batch formation as pure functions over lists: which queued items may share a batch.

An item's `key` says what must match exactly (input names, dtypes, every unpadded axis); its
`extent` gives the sizes of its padded axes. Items with equal keys may be merged, padded to the
largest extent, while the padded share of the batch stays under a bound.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from inferd.batching.layout import BatchLayout
from inferd.runtime.protocol import Feeds

Extent = tuple[tuple[int, ...], ...]
"""For each padded input (in layout order), the sizes of its padded axes."""


@dataclass(frozen=True)
class Signature:
    key: Hashable
    extent: Extent


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


def max_extent(extents: Sequence[Extent]) -> Extent:
    return tuple(
        tuple(max(sizes) for sizes in zip(*axes, strict=True))
        for axes in zip(*extents, strict=True)
    )


def padding_efficiency(rows: Sequence[int], extents: Sequence[Extent]) -> float:
    """Real elements / padded elements over the padded inputs (1.0 when nothing is padded)."""
    if not extents or not extents[0]:
        return 1.0
    total_rows = sum(rows)
    padded_extent = max_extent(extents)
    padded = sum(total_rows * math.prod(axes) for axes in padded_extent)
    real = sum(
        r * sum(math.prod(axes) for axes in ext) for r, ext in zip(rows, extents, strict=True)
    )
    return real / padded if padded else 1.0


def select_batch(
    candidates: Sequence[Candidate],
    max_rows: int,
    max_padding_waste: float,
) -> list[int]:
    """Indices of the items that form the next batch, the first candidate (the oldest) always in.

    Scans in arrival order; an item joins when its key matches the first one's, its rows fit
    under `max_rows`, and the padded share of the batch would stay within `max_padding_waste`.
    `max_rows <= 0` means an unbatched model: one item per run.
    """
    if not candidates:
        return []
    head = candidates[0]
    chosen = [0]
    if max_rows <= 0:
        return chosen
    rows = [head.rows]
    extents = [head.sig.extent]
    total = head.rows
    for index in range(1, len(candidates)):
        if total >= max_rows:
            break
        item = candidates[index]
        if item.sig.key != head.sig.key or total + item.rows > max_rows:
            continue
        if item.sig.extent != head.sig.extent:
            trial = padding_efficiency([*rows, item.rows], [*extents, item.sig.extent])
            if 1.0 - trial > max_padding_waste:
                continue
        chosen.append(index)
        rows.append(item.rows)
        extents.append(item.sig.extent)
        total += item.rows
    return chosen
