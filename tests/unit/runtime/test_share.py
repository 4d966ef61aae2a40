"""The gate between models' runs (inferd.runtime.share) through real instance pools and their
threads. The runtimes sleep for their compute time (sleeping releases the GIL as ONNX Runtime
does): the gate alone decides which model's run holds the one core of the machine here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Feeds, TensorSpec
from inferd.runtime.share import RuntimeShare


class TimedRuntime:
    """Sleeps `seconds` a run and records when each ran; fails when told to."""

    inputs = (TensorSpec("x", "FP32", (-1, 4), ("batch", None)),)
    outputs = (TensorSpec("y", "FP32", (-1, 4), ("batch", None)),)
    providers = ("CPUExecutionProvider",)

    def __init__(self, seconds: float, spans: list[tuple[str, float, float]], name: str) -> None:
        self.seconds = seconds
        self.spans = spans
        self.name = name
        self.fail = False

    def run(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        started = time.perf_counter()
        time.sleep(self.seconds)
        self.spans.append((self.name, started, time.perf_counter()))
        if self.fail:
            raise RuntimeError("instance failed")
        return {"y": feeds["x"]}

    def close(self) -> None:
        pass


FEEDS = {"x": np.ones((1, 4), dtype=np.float32)}


def pool_of(
    share: RuntimeShare, model: str, seconds: float, spans: list[tuple[str, float, float]]
) -> tuple[InstancePool, TimedRuntime]:
    runtime = TimedRuntime(seconds, spans, model)
    pool = InstancePool([runtime], cores=[1])
    pool.share_cores(share.model(model))
    return pool, runtime


async def keep_busy(pool: InstancePool, until: float) -> int:
    runs = 0
    while time.perf_counter() < until:
        await pool.run(FEEDS)
        runs += 1
    return runs


def overlaps(spans: list[tuple[str, float, float]]) -> int:
    """Pairs of runs of different models that ran at once."""
    ordered = sorted(spans, key=lambda s: s[1])
    return sum(
        1
        for i, (name, _, end) in enumerate(ordered)
        for other, start, _ in ordered[i + 1 :]
        if other != name and start < end - 0.001
    )


async def test_two_busy_models_take_the_core_in_turn_each_about_half() -> None:
    share = RuntimeShare(1)
    spans: list[tuple[str, float, float]] = []
    hot, _ = pool_of(share, "hot", 0.002, spans)  # short runs, back to back
    other, _ = pool_of(share, "other", 0.02, spans)
    until = time.perf_counter() + 1.0
    try:
        await asyncio.gather(keep_busy(hot, until), keep_busy(other, until))
    finally:
        hot.close()
        other.close()
    assert overlaps(spans) == 0
    busy = {name: sum(e - s for n, s, e in spans if n == name) for name in ("hot", "other")}
    assert busy["other"] / sum(busy.values()) == pytest.approx(0.5, abs=0.15)


async def test_a_model_alone_runs_as_without_the_gate() -> None:
    """Two instances of one model on a one-core gate: both run at once, as they would
    without it (a model alone is not held to the cores)."""
    share = RuntimeShare(1)
    spans: list[tuple[str, float, float]] = []
    runtimes = [TimedRuntime(0.05, spans, "alone") for _ in range(2)]
    pool = InstancePool(runtimes, cores=[1, 1])
    pool.share_cores(share.model("alone"))
    try:
        started = time.perf_counter()
        await asyncio.gather(pool.run(FEEDS), pool.run(FEEDS))
        assert time.perf_counter() - started < 0.09
    finally:
        pool.close()


async def test_a_failed_run_and_a_cancelled_wait_give_the_core_back() -> None:
    share = RuntimeShare(1)
    spans: list[tuple[str, float, float]] = []
    first, failing = pool_of(share, "first", 0.05, spans)
    second, _ = pool_of(share, "second", 0.01, spans)
    third, _ = pool_of(share, "third", 0.01, spans)
    failing.fail = True
    try:
        running = asyncio.create_task(first.run(FEEDS))
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(second.run(FEEDS))
        behind = asyncio.create_task(third.run(FEEDS))
        await asyncio.sleep(0.005)
        waiting.cancel()  # while it waits for the core
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(RuntimeError, match="instance failed"):
            await running
        await asyncio.wait_for(behind, 1.0)  # the core came back from both
        assert [name for name, _, _ in spans] == ["first", "third"]
        # and nothing is held: a new run of each starts at once
        failing.fail = False
        await asyncio.wait_for(asyncio.gather(second.run(FEEDS), first.run(FEEDS)), 1.0)
    finally:
        for pool in (first, second, third):
            pool.close()


async def test_inline_runs_wait_their_turn_on_a_runtime_thread() -> None:
    """`run_now` (a step on the event loop's thread) runs nothing while another model holds
    the core: the caller then awaits the run, which takes its turn."""
    share = RuntimeShare(1)
    spans: list[tuple[str, float, float]] = []
    busy, _ = pool_of(share, "busy", 0.05, spans)
    stepper, _ = pool_of(share, "stepper", 0.001, spans)
    try:
        assert stepper.run_now(FEEDS) is not None  # the core is free: it runs here
        running = asyncio.create_task(busy.run(FEEDS))
        await asyncio.sleep(0.01)
        assert stepper.run_now(FEEDS) is None
        waited = asyncio.create_task(stepper.run(FEEDS))  # what the caller does then
        await asyncio.sleep(0.005)
        assert not waited.done()
        await running
        await asyncio.wait_for(waited, 1.0)
        assert [name for name, _, _ in spans] == ["stepper", "busy", "stepper"]
    finally:
        busy.close()
        stepper.close()
