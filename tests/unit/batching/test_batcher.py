"""Every exit path of DynamicBatcher, driven by a fake runner gated with events."""

from __future__ import annotations

import asyncio
import random
import re

import numpy as np
import pytest

from inferd.batching import DynamicBatcher, build_layout
from inferd.batching.queue_admission import QUEUE_TIME_FLOOR_RUNS as FLOOR
from inferd.config.model import ModelConfig
from inferd.engine.kinds.batched import batcher_settings as engine_batcher_settings
from inferd.errors import (
    DeadlineExceededError,
    InternalError,
    InvalidInputError,
    QueueFullError,
    UnavailableError,
)
from inferd.observability.observer import BatchRan, Event, Observer
from inferd.observability.stats import BatchFacts
from inferd.runtime.placement import available_cores
from inferd.runtime.protocol import TensorSpec
from tests.fakes import FakeRunner, batcher_settings

X = TensorSpec("x", "FP32", (-1, 2), ("batch", None))
Y = TensorSpec("y", "FP32", (-1, 2), ("batch", None))
IDS = TensorSpec("ids", "INT64", (-1, -1), ("batch", "seq"))
HIDDEN = TensorSpec("hidden", "FP32", (-1, -1, 1), ("batch", "seq", None))
POOLED = TensorSpec("pooled", "INT64", (-1,), ("batch",))


def make(runner: FakeRunner, max_batch_size: int = 4, **kwargs: object) -> DynamicBatcher:
    layout = build_layout([X], [Y], {}, batched=max_batch_size > 0)
    settings = batcher_settings(max_batch_size, **kwargs)
    batcher = DynamicBatcher(layout, settings, runner)
    batcher.start()
    return batcher


def x(rows: int, value: float = 1.0) -> dict[str, np.ndarray]:
    return {"x": np.full((rows, 2), value, dtype=np.float32)}


async def until(predicate, timeout_s: float = 2.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not predicate():
        if loop.time() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.001)


async def test_lone_request_on_idle_batcher_is_dispatched_at_once() -> None:
    runner = FakeRunner()
    batcher = make(runner, max_queue_delay_s=10.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    out = await batcher.submit(x(1, 3.0), 1)
    assert loop.time() - started < 0.5  # far under the 10 s delay
    np.testing.assert_array_equal(out["y"], np.full((1, 2), 6.0))
    await batcher.close()


async def test_requests_queued_while_busy_form_one_batch_up_to_max_size() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=4)
    first = asyncio.create_task(batcher.submit(x(1, 0), 1))
    await runner.started.wait()
    rest = [asyncio.create_task(batcher.submit(x(1, i), 1)) for i in range(1, 7)]
    await until(lambda: batcher.queued_items == 6)
    gate.set()
    results = await asyncio.gather(first, *rest)
    assert runner.batch_sizes == [1, 4, 2]
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out["y"], np.full((1, 2), 2.0 * i))
    await batcher.close()


async def test_free_slot_waits_for_a_filling_batch_and_delay_bounds_the_wait() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    # two slots: one is held by a gated batch, the other waits for its batch to fill
    batcher = make(runner, max_batch_size=4, concurrency=2, max_queue_delay_s=0.05)
    held = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    # a steady trickle makes the arrival rate fast enough to fill within the delay
    tasks = []
    for _ in range(4):
        tasks.append(asyncio.create_task(batcher.submit(x(1), 1)))
        await asyncio.sleep(0.002)
    await until(lambda: len(runner.batches) == 2)
    assert runner.batch_sizes == [1, 4]  # filled, not dispatched one by one
    gate.set()
    await asyncio.gather(held, *tasks)
    await batcher.close()


async def test_max_queue_delay_dispatches_a_partial_batch() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=8, concurrency=2, max_queue_delay_s=0.03)
    held = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(batcher.submit(x(1), 1)) for _ in range(2)]
    t0 = loop.time()
    await until(lambda: len(runner.batches) == 2)
    waited = loop.time() - t0
    assert runner.batch_sizes == [1, 2]
    assert waited < 0.5
    gate.set()
    await asyncio.gather(held, *tasks)
    await batcher.close()


async def test_preferred_batch_size_dispatches_without_waiting_for_max() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(
        runner, max_batch_size=8, concurrency=2, max_queue_delay_s=5.0, preferred_batch_sizes=(2,)
    )
    held = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    tasks = [asyncio.create_task(batcher.submit(x(1), 1)) for _ in range(2)]
    await until(lambda: len(runner.batches) == 2, timeout_s=1.0)
    assert runner.batch_sizes == [1, 2]
    gate.set()
    await asyncio.gather(held, *tasks)
    await batcher.close()


async def test_oversized_request_is_split_and_reassembled_in_order() -> None:
    runner = FakeRunner()
    batcher = make(runner, max_batch_size=4)
    feeds = {"x": np.arange(22, dtype=np.float32).reshape(11, 2)}
    out = await batcher.submit(feeds, 11)
    np.testing.assert_array_equal(out["y"], feeds["x"] * 2)
    assert max(runner.batch_sizes) <= 4
    assert sum(runner.batch_sizes) == 11
    await batcher.close()


async def test_many_concurrent_producers_each_get_their_own_rows() -> None:
    runner = FakeRunner(delay_s=0.001)
    batcher = make(runner, max_batch_size=8, max_queue_size=10_000)
    rng = random.Random(7)

    async def producer(pid: int) -> None:
        for j in range(20):
            rows = rng.randint(1, 5)
            value = pid * 1000 + j
            feeds = {"x": np.full((rows, 2), value, dtype=np.float32)}
            out = await batcher.submit(feeds, rows)
            np.testing.assert_array_equal(out["y"], np.full((rows, 2), 2.0 * value))
            await asyncio.sleep(0)

    await asyncio.gather(*(producer(p) for p in range(30)))
    assert max(runner.batch_sizes) <= 8
    assert max(runner.batch_sizes) > 1  # batching happened
    await batcher.close()


async def test_padded_items_of_different_lengths_share_a_batch_and_come_back_exact() -> None:
    runner = FakeRunner(gate=asyncio.Event())
    layout = build_layout([IDS], [HIDDEN, POOLED], {"ids": 0}, batched=True)
    batcher = DynamicBatcher(layout, batcher_settings(8, max_padding_waste=0.5), runner)
    batcher.start()
    first = asyncio.create_task(batcher.submit({"ids": np.ones((1, 3), dtype=np.int64)}, 1))
    await runner.started.wait()
    lengths = [4, 3, 2, 4]
    feeds = [{"ids": np.arange(1, n + 1, dtype=np.int64)[None, :]} for n in lengths]
    tasks = [asyncio.create_task(batcher.submit(f, 1)) for f in feeds]
    await until(lambda: batcher.queued_items == 4)
    assert runner.gate is not None
    runner.gate.set()
    await first
    outs = await asyncio.gather(*tasks)
    assert runner.batch_sizes == [1, 4]
    assert runner.batches[1]["ids"].shape == (4, 4)
    for f, out in zip(feeds, outs, strict=True):
        n = f["ids"].shape[1]
        assert out["hidden"].shape == (1, n, 1)
        np.testing.assert_array_equal(out["hidden"][0, :, 0], f["ids"][0] + 0.5)
        assert int(out["pooled"][0]) == n * (n + 1) // 2
    await batcher.close()


async def test_queue_full_rejects_at_once_with_retry_after() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=1, max_queue_size=2)
    running = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    queued = [asyncio.create_task(batcher.submit(x(1), 1)) for _ in range(2)]
    await until(lambda: batcher.queued_items == 2)
    with pytest.raises(QueueFullError) as info:
        await batcher.submit(x(1), 1)
    assert info.value.retry_after_s is not None and info.value.retry_after_s >= 1
    gate.set()
    await asyncio.gather(running, *queued)
    await batcher.close()


async def test_request_expiring_in_the_queue_is_answered_and_never_run() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=1)
    running = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    loop = asyncio.get_running_loop()
    doomed = {"x": np.full((1, 2), 99.0, dtype=np.float32)}
    with pytest.raises(DeadlineExceededError):
        await batcher.submit(doomed, 1, deadline=loop.time() + 0.02)
    gate.set()
    await running
    await until(lambda: batcher.queued_items == 0 and batcher.running_batches == 0)
    assert all(99.0 not in b["x"] for b in runner.batches)
    await batcher.close()


async def test_deadline_already_passed_is_refused_before_queueing() -> None:
    batcher = make(FakeRunner())
    loop = asyncio.get_running_loop()
    with pytest.raises(DeadlineExceededError):
        await batcher.submit(x(1), 1, deadline=loop.time() - 1)
    assert batcher.queued_items == 0
    await batcher.close()


async def test_cancelled_caller_takes_its_queued_item_away_before_compute() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=4)
    running = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    gone = asyncio.create_task(batcher.submit({"x": np.full((1, 2), 7.0, np.float32)}, 1))
    stays = asyncio.create_task(batcher.submit(x(1, 5.0), 1))
    await until(lambda: batcher.queued_items == 2)
    gone.cancel()
    gate.set()
    await running
    out = await stays
    np.testing.assert_array_equal(out["y"], np.full((1, 2), 10.0))
    assert gone.cancelled()
    assert all(7.0 not in b["x"] for b in runner.batches)
    await batcher.close()


async def test_a_failing_batch_fails_each_of_its_requests_with_the_error() -> None:
    runner = FakeRunner(fail_with=InvalidInputError("bad"))
    batcher = make(runner)
    with pytest.raises(InvalidInputError):
        await batcher.submit(x(1), 1)
    await batcher.close()


async def test_an_unexpected_exception_becomes_an_internal_error_and_the_loop_survives() -> None:
    runner = FakeRunner(fail_with=RuntimeError("boom"))
    batcher = make(runner)
    with pytest.raises(InternalError):
        await batcher.submit(x(1), 1)
    runner.fail_with = None
    out = await batcher.submit(x(1, 2.0), 1)
    np.testing.assert_array_equal(out["y"], np.full((1, 2), 4.0))
    await batcher.close()


async def test_drain_finishes_queued_work_and_refuses_new() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=2)
    tasks = [asyncio.create_task(batcher.submit(x(1, i), 1)) for i in range(5)]
    await runner.started.wait()
    drained = asyncio.create_task(batcher.drain(timeout_s=5))
    await asyncio.sleep(0)
    with pytest.raises(UnavailableError):
        await batcher.submit(x(1), 1)
    gate.set()
    assert await drained
    results = await asyncio.gather(*tasks)
    assert len(results) == 5
    await batcher.close()


async def test_close_answers_queued_and_running_requests() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=1)
    tasks = [asyncio.create_task(batcher.submit(x(1), 1)) for _ in range(3)]
    await runner.started.wait()
    await batcher.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, UnavailableError) for r in results)


async def test_observer_sees_each_batch_and_a_failing_observer_breaks_nothing() -> None:
    records: list[BatchFacts] = []

    class Failing(Observer):
        def observe(self, event: Event) -> None:
            assert isinstance(event, BatchRan)
            records.append(event.record)
            raise RuntimeError("observer bug")

    layout = build_layout([X], [Y], {}, batched=True)
    batcher = DynamicBatcher(layout, batcher_settings(4), FakeRunner(), Failing())
    batcher.start()
    out = await batcher.submit(x(2, 1.0), 2)
    np.testing.assert_array_equal(out["y"], np.full((2, 2), 2.0))
    assert records[0].rows == 2 and records[0].items == 1 and records[0].error is None
    await batcher.close()


async def test_unbatched_model_runs_each_request_alone() -> None:
    runner = FakeRunner(delay_s=0.001)
    layout = build_layout([TensorSpec("x", "FP32", (2,), (None,))], [], {}, batched=False)
    batcher = DynamicBatcher(layout, batcher_settings(0), runner)
    batcher.start()
    feeds = [{"x": np.full((2,), i, dtype=np.float32)} for i in range(4)]
    outs = await asyncio.gather(*(batcher.submit(f, 1) for f in feeds))
    assert len(runner.batches) == 4
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out["y"], np.full((2,), 2.0 * i))
    await batcher.close()


async def test_items_of_one_request_are_batched_like_separate_requests() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    layout = build_layout([IDS], [HIDDEN, POOLED], {"ids": 0}, batched=True)
    settings = batcher_settings(4, max_padding_waste=0.6, max_batch_tokens=64)
    batcher = DynamicBatcher(layout, settings, runner)
    batcher.start()
    blocker = asyncio.create_task(batcher.submit({"ids": np.ones((1, 1), dtype=np.int64)}, 1))
    await runner.started.wait()
    lengths = [3, 9, 4, 8, 2, 9, 3]
    items = [{"ids": np.arange(1, n + 1, dtype=np.int64)[None, :]} for n in lengths]
    task = asyncio.create_task(batcher.submit_items(items))
    await until(lambda: batcher.queued_items == len(lengths))
    gate.set()
    await blocker
    outs = await task
    assert [int(o["pooled"][0]) for o in outs] == [n * (n + 1) // 2 for n in lengths]
    assert [o["hidden"].shape[1] for o in outs] == lengths
    later = [b["ids"] for b in runner.batches[1:]]
    assert all(b.shape[0] <= 4 and b.size <= 64 for b in later)
    assert sorted(len(b) for b in later) != [1] * len(lengths)  # texts shared batches
    await batcher.close()


async def test_queue_limit_counts_items() -> None:
    gate = asyncio.Event()
    runner = FakeRunner(gate=gate)
    batcher = make(runner, max_batch_size=1, max_queue_size=3)
    running = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    with pytest.raises(QueueFullError):
        await batcher.submit_items([x(1) for _ in range(4)])
    assert batcher.queued_items == 0
    gate.set()
    await running
    await batcher.close()


def test_run_and_queue_times_are_measured_finer_than_the_loops_clock() -> None:
    # uvloop's loop.time() counts whole milliseconds and is read once per loop turn: a batch
    # that computes for 2.5 ms (on a thread, as a runtime does) must not be reported as 2 or 3
    import time

    import uvloop

    from inferd.batching import Timing

    def compute(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        end = time.perf_counter() + 0.0025
        while time.perf_counter() < end:
            pass
        return {"y": feeds["x"] * 2}

    async def runner(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return await asyncio.to_thread(compute, feeds)

    async def requests() -> list[Timing]:
        layout = build_layout([X], [Y], {}, batched=True)
        batcher = DynamicBatcher(layout, batcher_settings(4), runner)
        batcher.start()
        timings = []
        for _ in range(20):
            timing = Timing()
            await batcher.submit(x(1), 1, timing=timing)
            timings.append(timing)
        await batcher.close()
        return timings

    timings = uvloop.run(requests())
    assert all(t.run_s >= 0.0025 for t in timings)  # the whole compute, never less
    assert not all((t.run_s * 1000).is_integer() for t in timings)
    assert all(t.queue_s < 0.0025 for t in timings)  # a lone request does not wait


async def test_items_queued_past_the_queue_time_bound_are_shed_and_never_run() -> None:
    runner = FakeRunner()
    batcher = make(runner, max_batch_size=1, max_queue_time_s=0.05)
    await batcher.submit(x(1), 1)  # a run measured: the bound is in force
    gate = runner.gate = asyncio.Event()
    runner.started.clear()
    running = asyncio.create_task(batcher.submit(x(1), 1))
    await runner.started.wait()
    loop = asyncio.get_running_loop()
    started = loop.time()
    doomed = {"x": np.full((1, 2), 99.0, dtype=np.float32)}
    # a standing queue (eight behind the running batch): each is answered at its bound
    results = await asyncio.gather(
        *(batcher.submit(doomed, 1) for _ in range(8)), return_exceptions=True
    )
    waited = loop.time() - started
    assert 0.04 <= waited < 0.5, waited  # answered at the bound, not when the runtime frees
    assert all(isinstance(r, QueueFullError) for r in results), results
    error = results[0]
    assert isinstance(error, QueueFullError) and "over its bound of 50 ms" in error.message
    assert error.retry_after_s is not None and error.retry_after_s >= 1
    gate.set()
    await running
    await until(lambda: batcher.queued_items == 0 and batcher.running_batches == 0)
    assert all(99.0 not in b["x"] for b in runner.batches)
    await batcher.close()


async def test_a_burst_of_fewer_than_eight_is_served_however_long_it_waits() -> None:
    runner = FakeRunner()
    batcher = make(runner, max_batch_size=1, max_queue_time_s=0.05)
    await batcher.submit(x(1), 1)  # a short run measured: the floor's runs are under the bound
    runner.delay_s = 0.03  # then large requests: seven take 210 ms, four times the bound
    results = await asyncio.gather(*(batcher.submit(x(1), 1) for _ in range(7)))
    assert len(results) == 7
    await batcher.close()
    # requests over the batch size come in parts: seven of them are still seven requests
    runner = FakeRunner()
    batcher = make(runner, max_batch_size=2, max_queue_time_s=0.05)
    await batcher.submit(x(1), 1)
    runner.delay_s = 0.02
    results = await asyncio.gather(*(batcher.submit(x(6), 6) for _ in range(7)))
    assert [r["y"].shape[0] for r in results] == [6] * 7  # 21 parts, 420 ms: none shed
    await batcher.close()


async def test_queued_work_over_the_bound_refuses_an_arrival_at_once_with_retry_after() -> None:
    runner = FakeRunner(delay_s=0.005)  # the floor's runs under the bound: the bound holds
    batcher = make(runner, max_batch_size=2, max_queue_time_s=0.2)
    assert batcher.admission.queue_time_refusal() is None  # nothing measured yet: no estimate
    # a burst: batches form while more wait, which measures what a queued row costs
    first = [asyncio.create_task(batcher.submit(x(1), 1)) for _ in range(8)]
    await asyncio.gather(*first)
    # 80 requests at once: those past about 160 ms of queued work (0.8 of the bound) are
    # refused as they come
    loop = asyncio.get_running_loop()
    held = [asyncio.create_task(batcher.submit(x(1), 1)) for _ in range(80)]
    await until(lambda: batcher.running_batches == 1)
    refused = batcher.admission.queue_time_refusal()
    assert refused is not None and refused.retry_after_s is not None
    assert refused.retry_after_s > 0  # the queue's work over the bound
    # the bound: 200 ms, or the floor's measured lone runs when a busy machine made them slower
    bound = re.search(r"more than its bound of (\d+) ms admits", refused.message)
    assert bound is not None and int(bound.group(1)) >= 200, refused.message
    started = loop.time()
    with pytest.raises(QueueFullError):
        await batcher.submit(x(1), 1)
    assert loop.time() - started < 0.01  # refused as it arrived, not after waiting
    results = await asyncio.gather(*held, return_exceptions=True)
    served = [r for r in results if not isinstance(r, BaseException)]
    shed = [r for r in results if isinstance(r, QueueFullError)]
    assert len(served) + len(shed) == 80 and served  # every one answered, the first ones run
    await until(lambda: batcher.queued_items == 0 and batcher.running_batches == 0)
    assert batcher.admission.queue_time_refusal() is None  # an empty queue admits again
    # requests read but not queued yet count ahead of the next one too
    assert batcher.admission.queue_time_refusal(arriving=100) is not None
    await batcher.close()


async def test_a_burst_of_a_few_slow_batches_is_queued_not_shed() -> None:
    # a model whose run takes half the bound: a burst of 8 waits up to 7 runs, more than the
    # bound, and is still a burst; the bound in force is QUEUE_TIME_FLOOR_RUNS measured runs
    runner = FakeRunner(delay_s=0.05)
    batcher = make(runner, max_batch_size=1, max_queue_time_s=0.1)
    await batcher.submit(x(1), 1)  # one run measured
    assert batcher.admission.queue_time_bound_s() == pytest.approx(FLOOR * 0.05, rel=0.5)
    results = await asyncio.gather(*(batcher.submit(x(1), 1) for _ in range(8)))
    assert len(results) == 8
    # a standing queue past the floor's runs is shed all the same
    assert batcher.admission.queue_time_refusal(arriving=FLOOR + 8) is not None
    await batcher.close()


class SharedCore(FakeRunner):
    """Batches that share one core: each runs `delay_s` times the batches running at once
    (what single-threaded instances on one core do: each gets its share of the core)."""

    running: int = 0

    async def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.running += 1
        try:
            await asyncio.sleep(self.delay_s * self.running)
            return {"y": feeds["x"] * 2}
        finally:
            self.running -= 1


async def test_the_bound_floor_is_a_request_alone_not_one_slowed_by_the_load() -> None:
    # lone requests that run beside others take longer; the floor of the bound (in runs) is
    # what a request costs alone, so overload does not stretch the bound it is there to keep
    runner = SharedCore(delay_s=0.01)
    batcher = make(runner, max_batch_size=1, concurrency=3, max_queue_time_s=0.05)
    await batcher.submit(x(1), 1)  # alone: 10 ms
    assert batcher.admission.queue_time_bound_s() == pytest.approx(FLOOR * 0.01, rel=0.5)
    for _ in range(5):  # three at a time: 30 ms each
        await asyncio.gather(*(batcher.submit(x(1), 1) for _ in range(3)))
    assert batcher.admission.queue_time_bound_s() == pytest.approx(FLOOR * 0.01, rel=0.5)
    await batcher.close()


async def test_before_a_run_is_measured_nothing_is_shed_by_waiting() -> None:
    # the first batch of a slow model holds the first arrivals past the bound: nothing yet
    # says that is more than a burst
    runner = FakeRunner(delay_s=0.08)
    batcher = make(runner, max_batch_size=1, max_queue_time_s=0.05)
    assert batcher.admission.queue_time_bound_s() is None
    results = await asyncio.gather(*(batcher.submit(x(1), 1) for _ in range(3)))
    assert len(results) == 3
    assert batcher.admission.queue_time_bound_s() == pytest.approx(FLOOR * 0.08, rel=0.5)
    await batcher.close()


async def test_without_a_queue_time_bound_nothing_is_shed_by_waiting() -> None:
    runner = FakeRunner(delay_s=0.02)
    batcher = make(runner, max_batch_size=1, max_queue_time_s=None)
    results = await asyncio.gather(*(batcher.submit(x(1), 1) for _ in range(10)))
    assert len(results) == 10
    assert batcher.admission.queue_time_refusal(arriving=1000) is None
    await batcher.close()


class OneAtATime(FakeRunner):
    """Each batch waits until the test lets it end (`release`), so runtimes free up in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Event] = []
        self.open = False

    async def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.batches.append(feeds)
        gate = asyncio.Event()
        self.gates.append(gate)
        if not self.open:
            await gate.wait()
        return {"y": feeds["x"] * 2}

    def release(self, everything: bool = False) -> None:
        self.open = self.open or everything
        for gate in self.gates if everything else self.gates[:1]:
            gate.set()
        self.gates = [] if everything else self.gates[1:]


async def test_on_the_cpu_a_batch_takes_its_runtimes_share_of_the_queue() -> None:
    # three runtimes busy, each on cores of its own, nine requests queued: the first to free
    # up takes a third (not all nine on its one runtime while the other two find nothing)
    for lanes, taken in ((1, 8), (3, 3)):
        runner = OneAtATime()
        batcher = make(
            runner, max_batch_size=8, concurrency=3, max_queue_delay_s=0.0, queue_lanes=lanes
        )
        running = []
        for i in range(3):  # one at a time: each a batch of its own
            running.append(asyncio.create_task(batcher.submit(x(1), 1)))
            await until(lambda n=i + 1, r=runner: len(r.batches) == n)  # type: ignore[misc]
        queued = [asyncio.create_task(batcher.submit(x(1), 1)) for _ in range(9)]
        await until(lambda b=batcher: b.queued_items == 9)  # type: ignore[misc]
        runner.release()  # the first batch ends; two still run
        await until(lambda r=runner: len(r.batches) == 4)  # type: ignore[misc]
        assert runner.batch_sizes[3] == taken
        runner.release(everything=True)
        await asyncio.gather(*running, *queued)
        assert sum(runner.batch_sizes) == 12
        await batcher.close()
    # alone (nothing else running), a batch takes the queue: the solo session has every core
    runner = OneAtATime()
    runner.open = True
    batcher = make(runner, max_batch_size=8, concurrency=3, queue_lanes=3)
    await batcher.submit_items([x(1) for _ in range(4)])  # four items, one request
    assert runner.batch_sizes == [4]
    await batcher.close()


def test_only_several_instances_on_cores_of_their_own_share_the_queue() -> None:
    config = ModelConfig(max_batch_size=8)
    assert engine_batcher_settings(config, 3, on_cpu=True).queue_lanes == min(3, available_cores())
    assert engine_batcher_settings(config, 1, on_cpu=True).queue_lanes == 1
    assert engine_batcher_settings(config, 3, on_cpu=False).queue_lanes == 1
