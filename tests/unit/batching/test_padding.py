from __future__ import annotations

import numpy as np

from inferd.batching.layout import build_layout
from inferd.batching.padding import concat_chunks, merge_feeds, split_outputs
from inferd.runtime.protocol import TensorSpec

IDS = TensorSpec("ids", "INT64", (-1, -1), ("batch", "seq"))
MASK = TensorSpec("mask", "INT64", (-1, -1), ("batch", "seq"))
HIDDEN = TensorSpec("hidden", "FP32", (-1, -1, 2), ("batch", "seq", None))
POOLED = TensorSpec("pooled", "FP32", (-1,), ("batch",))
LAYOUT = build_layout([IDS, MASK], [HIDDEN, POOLED], {"ids": 0, "mask": 0}, batched=True)


def feeds(rows: int, length: int, start: int) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + rows * length, dtype=np.int64).reshape(rows, length)
    return {"ids": ids, "mask": np.ones_like(ids)}


def test_merge_pads_each_item_to_the_longest_with_the_pad_value() -> None:
    a, b = feeds(1, 2, 10), feeds(2, 4, 20)
    merged = merge_feeds([a, b], LAYOUT)
    assert merged["ids"].shape == (3, 4)
    np.testing.assert_array_equal(merged["ids"][0], [10, 11, 0, 0])
    np.testing.assert_array_equal(merged["mask"][0], [1, 1, 0, 0])
    np.testing.assert_array_equal(merged["ids"][1:], b["ids"])


def test_split_cuts_rows_and_padded_axes_back_exactly() -> None:
    a, b = feeds(1, 2, 10), feeds(2, 4, 20)
    merged = merge_feeds([a, b], LAYOUT)
    ids = merged["ids"].astype(np.float32)
    outputs = {
        "hidden": np.stack([ids, merged["mask"].astype(np.float32)], axis=-1),
        "pooled": (ids * merged["mask"]).sum(axis=1),
    }
    part_a, part_b = split_outputs(outputs, [a, b], [1, 2], LAYOUT)
    assert part_a["hidden"].shape == (1, 2, 2)
    assert part_b["hidden"].shape == (2, 4, 2)
    np.testing.assert_array_equal(part_a["hidden"][..., 0], a["ids"])
    np.testing.assert_array_equal(part_b["hidden"][..., 0], b["ids"])
    np.testing.assert_array_equal(part_a["pooled"], a["ids"].sum(axis=1))
    np.testing.assert_array_equal(part_b["pooled"], b["ids"].sum(axis=1))


def test_equal_shapes_are_concatenated_without_padding() -> None:
    a, b = feeds(1, 3, 0), feeds(1, 3, 5)
    merged = merge_feeds([a, b], LAYOUT)
    np.testing.assert_array_equal(merged["ids"], np.concatenate([a["ids"], b["ids"]]))


def test_single_item_passes_through_untouched() -> None:
    a = feeds(2, 3, 0)
    merged = merge_feeds([a], LAYOUT)
    assert merged["ids"] is a["ids"]


def test_concat_chunks_restores_order() -> None:
    chunks = [{"y": np.array([[1.0], [2.0]])}, {"y": np.array([[3.0]])}]
    np.testing.assert_array_equal(concat_chunks(chunks)["y"], [[1.0], [2.0], [3.0]])


def test_left_padding_puts_values_last_and_cuts_them_back() -> None:
    layout = build_layout([IDS, MASK], [HIDDEN, POOLED], {"ids": 0, "mask": 0}, True, pad_left=True)
    a, b = feeds(1, 2, 10), feeds(1, 4, 20)
    merged = merge_feeds([a, b], layout)
    np.testing.assert_array_equal(merged["ids"][0], [0, 0, 10, 11])
    np.testing.assert_array_equal(merged["mask"][0], [0, 0, 1, 1])
    hidden = np.stack([merged["ids"], merged["mask"]], axis=-1).astype(np.float32)
    outputs = {"hidden": hidden, "pooled": np.zeros(2, np.float32)}
    part_a, part_b = split_outputs(outputs, [a, b], [1, 1], layout)
    np.testing.assert_array_equal(part_a["hidden"][0, :, 0], [10, 11])
    np.testing.assert_array_equal(part_b["hidden"][0, :, 0], b["ids"][0])
