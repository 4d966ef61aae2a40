"""Merging items into one batch (concatenate, pad) and slicing the outputs back exactly."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inferd.batching.layout import BatchLayout
from inferd.runtime.protocol import Array, Feeds


def merge_feeds(items: Sequence[Feeds], layout: BatchLayout) -> dict[str, Array]:
    """One feed dict for the batch: items concatenated on axis 0, padded where lengths differ."""
    if len(items) == 1:
        return dict(items[0])
    merged: dict[str, Array] = {}
    for name in items[0]:
        arrays = [item[name] for item in items]
        first_shape = arrays[0].shape
        if all(a.shape[1:] == first_shape[1:] for a in arrays):
            merged[name] = np.concatenate(arrays, axis=0)
            continue
        target = tuple(max(a.shape[d] for a in arrays) for d in range(1, len(first_shape)))
        total = sum(a.shape[0] for a in arrays)
        out = np.full((total, *target), layout.pad_values.get(name, 0), dtype=arrays[0].dtype)
        row = 0
        for a in arrays:
            region = (
                slice(row, row + a.shape[0]),
                *(
                    _span(n, full, layout.pad_left)
                    for n, full in zip(a.shape[1:], target, strict=True)
                ),
            )
            out[region] = a
            row += a.shape[0]
        merged[name] = out
    return merged


def split_outputs(
    outputs: dict[str, Array],
    items: Sequence[Feeds],
    rows: Sequence[int],
    layout: BatchLayout,
) -> list[dict[str, Array]]:
    """Each item's slice of the batch outputs, with padded axes cut back to its own lengths."""
    if len(items) == 1:
        return [outputs]
    parts: list[dict[str, Array]] = [{} for _ in items]
    for name, array in outputs.items():
        rules = layout.unpad.get(name, ())
        start = 0
        for index, (item, n) in enumerate(zip(items, rows, strict=True)):
            region: list[slice] = [slice(start, start + n)]
            region.extend(slice(None) for _ in range(1, array.ndim))
            for rule in rules:
                length = item[rule.input_name].shape[rule.input_axis]
                region[rule.output_axis] = _span(
                    length, array.shape[rule.output_axis], layout.pad_left
                )
            parts[index][name] = array[tuple(region)]
            start += n
    return parts


def _span(length: int, full: int, pad_left: bool) -> slice:
    """Where an item's `length` values sit in a padded axis of size `full`."""
    return slice(full - length, full) if pad_left else slice(0, length)


def concat_chunks(chunks: Sequence[dict[str, Array]]) -> dict[str, Array]:
    """Reassembles the outputs of a request that was split into chunks, in order."""
    if len(chunks) == 1:
        return chunks[0]
    return {name: np.concatenate([c[name] for c in chunks], axis=0) for name in chunks[0]}
