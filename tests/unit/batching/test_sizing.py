"""The batch size cap learned from run times (inferd.batching.sizing), on simulated costs and
on a batcher whose runner costs more per row in big batches."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

import numpy as np
import pytest

import inferd.batching
from inferd.batching import DynamicBatcher, build_layout
from inferd.batching.sizing import PROBE_EVERY, BatchSizer, bucket_of
from inferd.runtime.protocol import TensorSpec
from tests.fakes import batcher_settings

X = TensorSpec("x", "FP32", (-1, 2), ("batch", None))
Y = TensorSpec("y", "FP32", (-1, 2), ("batch", None))


def saturate(sizer: BatchSizer, per_token: Callable[[int], float], batches: int) -> list[int]:
    """A deep queue: every batch is as large as the cap lets it be (4096 tokens at most)."""
    sizes = []
    for _ in range(batches):
        cap = sizer.next_cap()
        tokens = min(cap or 4096, 4096)
        sizer.observe(tokens, per_token(tokens) * tokens)
        sizes.append(tokens)
    return sizes


def test_buckets_are_powers_of_two() -> None:
    assert [bucket_of(t) for t in (1, 2, 3, 4, 5, 512, 513, 4096)] == [0, 1, 2, 2, 3, 9, 10, 12]


def test_it_finds_the_cheapest_size_when_big_batches_cost_more_per_token() -> None:
    # a CPU whose caches hold 512 tokens' activations: beyond, each token costs more
    sizer = BatchSizer(4096)
    sizes = saturate(sizer, lambda t: 1.0 if t <= 512 else 1.0 + (t - 512) / 1024, 400)
    assert sizer.cap_tokens == 512
    late = sizes[-100:]
    assert late.count(512) >= 100 * (1 - 2 / PROBE_EVERY)  # probes aside, all at the cap
    assert max(late) <= 1024 and min(late) >= 64  # probes: a bucket up, at most 3 down


def test_it_learns_no_cap_where_bigger_batches_are_cheaper() -> None:
    # a GPU: the bigger the batch, the cheaper each token
    sizer = BatchSizer(4096)
    sizes = saturate(sizer, lambda t: 1.0 / t**0.5, 200)
    assert sizer.cap_tokens == 4096
    assert sizes[-PROBE_EVERY * 2 :].count(4096) >= PROBE_EVERY * 2 - 2
    unbounded = BatchSizer(None)
    saturate(unbounded, lambda t: 1.0 / t**0.5, 200)
    assert unbounded.cap_tokens is None


def test_probes_follow_a_machine_that_changes() -> None:
    sizer = BatchSizer(4096)
    saturate(sizer, lambda t: 1.0 if t <= 256 else t / 256, 300)
    assert sizer.cap_tokens == 256
    # now every size costs the same: the cap climbs back, a bucket at a time (each once its
    # old cost has faded)
    saturate(sizer, lambda t: 1.0, 1500)
    assert sizer.cap_tokens == 4096


def test_one_noisy_probe_does_not_move_the_cap() -> None:
    sizer = BatchSizer(4096)
    for _ in range(PROBE_EVERY - 1):
        assert sizer.next_cap() == 4096
        sizer.observe(4096, 4096 * 1.0)
    probe = sizer.next_cap()
    assert probe == 2048  # the first probe goes down
    sizer.observe(probe, probe * 0.1)  # ten times cheaper, once
    assert sizer.cap_tokens == 4096
    assert sizer.state() == {"cap_tokens": 4096, "us_per_token": {"2048": 1e5, "4096": 1e6}}


class SimulatedClock:
    """The batcher's clock with simulated run times added: the wall clock (so that waits and
    arrival rates move as they do), plus every cost the fake runtime "spent", which it adds
    instead of sleeping, so what the batcher measures is the simulated cost, whatever the
    machine's load."""

    def __init__(self) -> None:
        self.spent = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.spent


@pytest.mark.parametrize("learn", [True, False])
def test_a_batcher_under_pressure_learns_to_form_smaller_batches(
    learn: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each row costs 0.2 ms in a batch of up to 2 rows, 1 ms in a bigger one: a deep queue's
    # batches must shrink to 2 rows (the rule is learned only from run times), unless the
    # model's config turns the learning off
    clock = SimulatedClock()
    for module in vars(inferd.batching).values():  # every module that reads the clock
        if inspect.ismodule(module) and hasattr(module, "CLOCK"):
            monkeypatch.setattr(module, "CLOCK", clock)
    rows_seen: list[int] = []

    async def runner(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = feeds["x"].shape[0]
        rows_seen.append(rows)
        clock.spent += rows * (0.0002 if rows <= 2 else 0.001)
        await asyncio.sleep(0)  # (a turn of the loop, as a runtime's thread gives)
        return {"y": feeds["x"] * 2}

    async def deep_queue() -> None:
        layout = build_layout([X], [Y], {}, batched=True)
        # a deep queue on purpose (what is measured is the batches formed from it)
        settings = batcher_settings(
            8, max_queue_size=2000, learn_batch_tokens=learn, max_queue_time_s=None
        )
        batcher = DynamicBatcher(layout, settings, runner)
        batcher.start()
        one = {"x": np.ones((1, 2), np.float32)}
        answers = await asyncio.gather(*(batcher.submit(one, 1) for _ in range(1500)))
        await batcher.close()
        assert all(np.array_equal(a["y"], one["x"] * 2) for a in answers)

    asyncio.run(deep_queue())
    assert rows_seen[0] == 8  # nothing learned yet: the largest batch the queue gives
    late = rows_seen[-40:]
    if learn:
        assert sum(r <= 2 for r in late) >= 30, late
    else:
        assert late[:-1] == [8] * 39  # (the last: what remained)
