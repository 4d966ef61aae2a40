"""Fault isolation and out-of-memory recovery in the batcher, with runtimes that fail on purpose
(fakes: a real allocator failure or a poisoned model cannot be produced on demand here)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from inferd.batching import BatchRecord, DynamicBatcher, build_layout
from inferd.batching.measures import CLOCK
from inferd.errors import InternalError, InvalidInputError, OutOfMemoryError, UnavailableError
from inferd.observability.observer import BatchRan, Event, MemoryPressure, Observer, Unhealthy
from inferd.runtime.protocol import Array, TensorSpec
from tests.fakes import batcher_settings

X = TensorSpec("x", "FP32", (-1, 2), ("batch", None))
Y = TensorSpec("y", "FP32", (-1, 2), ("batch", None))
POISON = 13.0


class PoisonRunner:
    """Fails any batch holding a poisoned row; counts the batches it was given."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.sizes: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, feeds: dict[str, Array]) -> dict[str, Array]:
        await self.gate.wait()
        self.sizes.append(int(feeds["x"].shape[0]))
        if (feeds["x"] == POISON).any():
            raise self.error
        return {"y": feeds["x"] * 2}


class OomRunner:
    """Raises an allocation failure for batches above `limit` rows."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sizes: list[int] = []
        self.gate = asyncio.Event()

    async def __call__(self, feeds: dict[str, Array]) -> dict[str, Array]:
        await self.gate.wait()
        rows = int(feeds["x"].shape[0])
        self.sizes.append(rows)
        if rows > self.limit:
            raise OutOfMemoryError("out of memory while running the model")
        return {"y": feeds["x"] * 2}


class Recorder(Observer):
    def __init__(self) -> None:
        self.records: list[BatchRecord] = []
        self.pressure: list[tuple[int, int]] = []
        self.unhealthy: list[str] = []

    def observe(self, event: Event) -> None:
        if isinstance(event, BatchRan):
            assert isinstance(event.record, BatchRecord)
            self.records.append(event.record)
        elif isinstance(event, MemoryPressure):
            self.pressure.append((event.rows, event.limit))
        elif isinstance(event, Unhealthy):
            self.unhealthy.append(event.reason)


def batcher(runner: object, observer: Recorder | None = None, **settings: object) -> DynamicBatcher:
    layout = build_layout([X], [Y], {}, batched=True)
    made = DynamicBatcher(
        layout,
        batcher_settings(**{"max_batch_size": 8, **settings}),
        runner,  # type: ignore[arg-type]
        observer,
    )
    made.start()
    return made


def x(value: float) -> dict[str, Array]:
    return {"x": np.full((1, 2), value, dtype=np.float32)}


async def fill(b: DynamicBatcher, gate: asyncio.Event, values: list[float]) -> list[object]:
    """Queues all values behind a closed gate so they form one batch, then opens it."""
    blocker = asyncio.create_task(b.submit(x(0.5), 1))
    await asyncio.sleep(0.01)
    tasks = [asyncio.create_task(b.submit(x(v), 1)) for v in values]
    await asyncio.sleep(0.01)
    gate.set()
    await blocker
    return list(await asyncio.gather(*tasks, return_exceptions=True))


@pytest.mark.parametrize("error", [InvalidInputError("bad item"), RuntimeError("kernel crash")])
async def test_only_the_offending_item_fails(error: Exception) -> None:
    runner = PoisonRunner(error)
    runner.gate.clear()
    b = batcher(runner)
    values = [1.0, 2.0, POISON, 4.0, 5.0, 6.0, 7.0, 8.0]
    results = await fill(b, runner.gate, values)
    for value, result in zip(values, results, strict=True):
        if value == POISON:
            expected = InvalidInputError if isinstance(error, InvalidInputError) else InternalError
            assert isinstance(result, expected)
        else:
            assert isinstance(result, dict)
            np.testing.assert_array_equal(result["y"], np.full((1, 2), 2 * value))
    assert 8 in runner.sizes and 1 in runner.sizes  # tried whole, then isolated by halving
    assert len(runner.sizes) <= 1 + 2 * 8  # bounded retries, no loop
    await b.close()


async def test_out_of_memory_halves_the_batch_and_lowers_the_limit() -> None:
    runner = OomRunner(limit=2)
    recorder = Recorder()
    b = batcher(runner, recorder, oom_cooldown_s=3600)
    results = await fill(b, runner.gate, [float(i) for i in range(1, 9)])
    assert all(isinstance(r, dict) for r in results)  # everyone answered, nobody got 5070
    assert runner.sizes[1] == 8 and max(runner.sizes[2:]) <= 4
    assert recorder.pressure and recorder.pressure[0] == (8, 4)
    assert b.max_rows(CLOCK()) <= 2  # lowered until the cool-down ends
    runner.sizes.clear()
    runner.gate.clear()
    await fill(b, runner.gate, [float(i) for i in range(8)])
    assert max(runner.sizes[1:]) <= 2  # later batches respect the lowered limit at once
    assert any(r.error is not None for r in recorder.records)
    await b.close()


async def test_limit_grows_back_after_the_cooldown() -> None:
    runner = OomRunner(limit=1)
    b = batcher(runner, oom_cooldown_s=0.05)
    await fill(b, runner.gate, [1.0, 2.0, 3.0, 4.0])
    loop = asyncio.get_running_loop()
    lowered = b.max_rows(loop.time())
    assert lowered <= 2
    await asyncio.sleep(0.06)
    grown = b.max_rows(loop.time())
    assert lowered < grown <= 8
    await b.close()


async def test_5070_only_when_even_one_item_cannot_run() -> None:
    runner = OomRunner(limit=0)
    b = batcher(runner, max_consecutive_failures=100)
    runner.gate.set()
    with pytest.raises(OutOfMemoryError):
        await b.submit(x(1.0), 1)
    await b.close()


async def test_a_runtime_that_keeps_failing_turns_unhealthy_instead_of_looping() -> None:
    runner = PoisonRunner(RuntimeError("device lost"))
    recorder = Recorder()
    b = batcher(runner, recorder, max_consecutive_failures=3)
    for _ in range(3):
        with pytest.raises(InternalError):
            await b.submit(x(POISON), 1)
    assert recorder.unhealthy and "3 times in a row" in recorder.unhealthy[0]
    with pytest.raises(UnavailableError):
        await b.submit(x(1.0), 1)
    await b.close()


async def test_bad_inputs_never_make_the_runtime_unhealthy() -> None:
    runner = PoisonRunner(InvalidInputError("bad"))
    recorder = Recorder()
    b = batcher(runner, recorder, max_consecutive_failures=2)
    for _ in range(4):
        with pytest.raises(InvalidInputError):
            await b.submit(x(POISON), 1)
    out = await b.submit(x(2.0), 1)
    np.testing.assert_array_equal(out["y"], np.full((1, 2), 4.0))
    assert not recorder.unhealthy
    await b.close()


async def test_a_request_whose_deadline_the_queue_cannot_meet_is_refused_at_once() -> None:
    from inferd.errors import QueueFullError

    class Slow:
        async def __call__(self, feeds: dict[str, Array]) -> dict[str, Array]:
            await asyncio.sleep(0.05)
            return {"y": feeds["x"]}

    b = batcher(Slow(), max_batch_size=1)
    await b.submit(x(1.0), 1)  # measures one batch: about 50 ms
    queued = [asyncio.create_task(b.submit(x(1.0), 1)) for _ in range(6)]
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(QueueFullError, match="deadline"):
        await b.submit(x(2.0), 1, deadline=loop.time() + 0.1)  # 7 x 50 ms ahead of it
    assert loop.time() - started < 0.01  # refused in under 10 ms, not after waiting
    ok = await b.submit(x(3.0), 1, deadline=loop.time() + 5)
    assert ok["y"][0, 0] == 3.0
    await asyncio.gather(*queued)
    await b.close()
