from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from inferd.batching.formation import (
    Signature,
    padding_efficiency,
    select_batch,
    signature,
)
from inferd.batching.layout import build_layout
from inferd.runtime.protocol import TensorSpec

IDS = TensorSpec("ids", "INT64", (-1, -1), ("batch", "seq"))
HIDDEN = TensorSpec("hidden", "FP32", (-1, -1, 1), ("batch", "seq", None))
POOLED = TensorSpec("pooled", "INT64", (-1,), ("batch",))


@dataclass
class Item:
    rows: int
    sig: Signature


def item(length: int, rows: int = 1, layout=None) -> Item:
    layout = layout or build_layout([IDS], [HIDDEN, POOLED], {"ids": 0}, batched=True)
    feeds = {"ids": np.ones((rows, length), dtype=np.int64)}
    return Item(rows, signature(feeds, layout))


def test_layout_links_output_axes_to_padded_inputs_by_dim_name() -> None:
    layout = build_layout([IDS], [HIDDEN, POOLED], {"ids": 0}, batched=True)
    assert layout.padded_axes == {"ids": (1,)}
    assert layout.mix_lengths
    (rule,) = layout.unpad["hidden"]
    assert (rule.output_axis, rule.input_name, rule.input_axis) == (1, "ids", 1)
    assert "pooled" not in layout.unpad


def test_layout_refuses_mixing_when_an_output_axis_cannot_be_cut_back() -> None:
    unknown = TensorSpec("hidden", "FP32", (-1, -1), ("batch", "unk__1"))
    layout = build_layout([IDS], [unknown], {"ids": 0}, batched=True)
    assert not layout.mix_lengths
    a, b = item(3, layout=layout), item(5, layout=layout)
    assert a.sig.key != b.sig.key


def test_layout_without_pad_values_pads_nothing() -> None:
    layout = build_layout([IDS], [HIDDEN], {}, batched=True)
    assert not layout.pads and not layout.mix_lengths


def test_same_length_items_share_a_batch_up_to_max_rows() -> None:
    items = [item(4, rows=3) for _ in range(5)]
    assert select_batch(items, max_rows=8, max_padding_waste=0.0) == [0, 1]


def test_rows_that_do_not_fit_are_skipped_but_smaller_later_items_join() -> None:
    items = [item(4, rows=5), item(4, rows=4), item(4, rows=3)]
    assert select_batch(items, max_rows=8, max_padding_waste=0.0) == [0, 2]


def test_padding_waste_bound_keeps_far_lengths_apart() -> None:
    items = [item(10), item(9), item(2), item(10)]
    # 10 + 9 padded to 10: waste 5%; adding 2 would make it 1 - 21/30 = 30% > 25%.
    assert select_batch(items, max_rows=8, max_padding_waste=0.25) == [0, 1, 3]
    assert select_batch(items, max_rows=8, max_padding_waste=0.0) == [0, 3]
    assert select_batch(items, max_rows=8, max_padding_waste=1.0) == [0, 1, 2, 3]


def test_different_keys_never_merge() -> None:
    layout = build_layout([IDS], [HIDDEN], {"ids": 0}, batched=True)
    a = Item(1, signature({"ids": np.ones((1, 3), dtype=np.int64)}, layout))
    b = Item(1, signature({"ids": np.ones((1, 3), dtype=np.int32)}, layout))
    assert select_batch([a, b], max_rows=8, max_padding_waste=1.0) == [0]


def test_unbatched_model_runs_one_item() -> None:
    items = [item(4), item(4)]
    assert select_batch(items, max_rows=0, max_padding_waste=1.0) == [0]


def test_empty_queue_selects_nothing() -> None:
    assert select_batch([], max_rows=8, max_padding_waste=0.0) == []


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [([4, 4], 1.0), ([2, 4], 0.75), ([1, 3], 4 / 6)],
)
def test_padding_efficiency(lengths: list[int], expected: float) -> None:
    extents = [((n,),) for n in lengths]
    assert padding_efficiency([1] * len(lengths), extents) == pytest.approx(expected)


def test_token_budget_caps_rows_times_padded_length() -> None:
    items = [item(10) for _ in range(6)]
    # 10 tokens each: a budget of 35 admits three rows (30 tokens), not four (40)
    assert select_batch(items, max_rows=8, max_padding_waste=1.0, max_tokens=35) == [0, 1, 2]


def test_token_budget_counts_the_padded_length_not_the_real_one() -> None:
    items = [item(2), item(2), item(16)]
    # 2 + 2 + 16 real tokens, but padded to 16: 3 x 16 = 48 > 40
    assert select_batch(items, max_rows=8, max_padding_waste=1.0, max_tokens=40) == [0, 1]


def test_oldest_item_runs_even_when_alone_it_passes_the_budget() -> None:
    assert select_batch([item(100)], max_rows=8, max_padding_waste=0.0, max_tokens=10) == [0]


def test_length_grouping_gathers_the_lengths_nearest_the_oldest_item() -> None:
    lengths = [10, 2, 30, 9, 3, 11, 29, 10]
    items = [item(n) for n in lengths]
    chosen = select_batch(items, max_rows=4, max_padding_waste=0.5, group_by_length=True)
    assert sorted(lengths[i] for i in chosen) == [9, 10, 10, 11]
    in_order = select_batch(items, max_rows=4, max_padding_waste=0.5, group_by_length=False)
    assert in_order[0] == 0 and sorted(lengths[i] for i in in_order) != [9, 10, 10, 11]


def test_a_deep_queue_tightens_the_padding_bound_to_a_quarter() -> None:
    # head 20; 18 pads 2 of 40 (5%), 16 would make it 1 - 54/60 = 10%
    shallow = [item(n) for n in (20, 18, 16)]
    assert select_batch(shallow, max_rows=4, max_padding_waste=0.12, group_by_length=True) == [
        0,
        1,
        2,
    ]
    # more rows wait than one batch takes: the ones left out will find partners of their own
    # length, so only 0.12 / 4 = 3% waste is allowed: 18 (5%) stays out too
    deep = [item(n) for n in (20, 18, 16, 5, 5)]
    assert select_batch(deep, max_rows=4, max_padding_waste=0.12, group_by_length=True) == [0]
    same = [item(20) for _ in range(6)]  # no padding at all: the bound does not matter
    assert select_batch(same, max_rows=4, max_padding_waste=0.12, group_by_length=True) == [
        0,
        1,
        2,
        3,
    ]
