"""Background work (shadow traffic, jobs) runs on the pool's lowest-priority threads, in
batches of its own, after the serving items waiting; serving work on the serving threads."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pytest

from inferd.batching import DynamicBatcher, build_layout
from inferd.runtime import priority
from inferd.runtime.pool import InstancePool
from inferd.runtime.protocol import Array, Feeds, TensorSpec
from tests.fakes import batcher_settings

X = TensorSpec("x", "FP32", (-1, 1), ("batch", None))
Y = TensorSpec("y", "FP32", (-1, 1), ("batch", None))

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="thread niceness is Linux's")


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Waits for `condition` (a thread's run starting), however busy the machine."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "not within the time"
        await asyncio.sleep(0.005)


class NicenessRuntime:
    """Answers each row with the niceness of the thread that ran it; `gate` holds runs."""

    inputs = (X,)
    outputs = (Y,)
    providers = ("CPUExecutionProvider",)

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.runs: list[tuple[float, int, int]] = []
        """(niceness, scheduling policy, rows) of each run, in order."""

    def run(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        self.gate.wait(5)
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        self.runs.append((nice, os.sched_getscheduler(0), int(feeds["x"].shape[0])))
        return {"y": np.full_like(feeds["x"], nice)}

    def close(self) -> None:
        pass


async def niceness_of(batcher: DynamicBatcher, background: bool) -> float:
    async def submit() -> float:
        if background:
            priority.background()
        out = await batcher.submit({"x": np.zeros((1, 1), np.float32)}, 1)
        return float(out["y"][0, 0])

    return await asyncio.get_running_loop().create_task(submit())


async def test_background_batches_run_on_the_lowest_threads() -> None:
    runtime = NicenessRuntime()
    pool = InstancePool([runtime])
    layout = build_layout([X], [Y], {}, batched=True)
    batcher = DynamicBatcher(layout, batcher_settings(4, concurrency=1), pool.run)
    batcher.start()
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        serving = await niceness_of(batcher, background=False)
        shadow = await niceness_of(batcher, background=True)
        assert serving == max(base, priority.SERVING_NICENESS)
        assert shadow == max(base, priority.BACKGROUND_NICENESS)
        assert priority.in_background() is False  # the mark stays in the task that set it

        # serving and background items queued together: they never share a batch, and the
        # serving item goes first; each runs at its own priority
        runtime.gate.clear()
        first = asyncio.create_task(niceness_of(batcher, background=False))
        await asyncio.sleep(0.05)  # the first batch is running, held by the gate
        mixed = [
            asyncio.create_task(niceness_of(batcher, background=b)) for b in (True, False, True)
        ]
        await asyncio.sleep(0.05)
        runtime.gate.set()
        runtime.runs.clear()
        assert await asyncio.gather(first, *mixed) == [serving, shadow, serving, shadow]
        # the held serving batch, the waiting serving item, then each background item alone
        assert [(n, rows) for n, _, rows in runtime.runs] == [
            (serving, 1),
            (serving, 1),
            (shadow, 1),
            (shadow, 1),
        ]
        background_policy = runtime.runs[-1][1]
        assert background_policy == os.SCHED_IDLE  # only cores nothing else wants
    finally:
        await batcher.close()
        pool.close()


async def test_a_gpu_instance_serves_at_the_loop_s_priority_and_a_cpu_one_below_it() -> None:
    """A thread that waits on its device (a GPU instance holds no cores) is not niced: its
    CPU is a few handoffs a batch, and below the loop it waited for the core while the
    device stood idle. A CPU instance's thread computes: below the loop."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    for cores, expected in (([0, 0], base), ([1, 1], max(base, priority.SERVING_NICENESS))):
        pool = InstancePool([NicenessRuntime(), NicenessRuntime()], cores=cores)
        layout = build_layout([X], [Y], {}, batched=True)
        batcher = DynamicBatcher(layout, batcher_settings(4, concurrency=2), pool.run)
        batcher.start()
        try:
            assert await niceness_of(batcher, background=False) == expected, cores
            assert await niceness_of(batcher, background=True) == max(
                base, priority.BACKGROUND_NICENESS
            )
        finally:
            await batcher.close()
            pool.close()


async def test_background_batches_leave_a_runtime_free_for_clients() -> None:
    started: list[bool] = []  # each run as it starts: background or not
    gate = threading.Event()

    class Recording(NicenessRuntime):
        def run(
            self,
            feeds: Feeds,
            output_names: Sequence[str] | None = None,
            into: Mapping[str, str] | None = None,
        ) -> dict[str, Array]:
            started.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) >= 19)
            gate.wait(5)
            return {"y": feeds["x"]}

    pool = InstancePool([Recording(), Recording(), Recording()])
    layout = build_layout([X], [Y], {}, batched=True)
    batcher = DynamicBatcher(layout, batcher_settings(1, concurrency=3), pool.run)
    batcher.start()
    try:
        jobs = [asyncio.create_task(niceness_of(batcher, background=True)) for _ in range(4)]
        await until(lambda: len(started) >= 2)
        await asyncio.sleep(0.05)  # a third background run would have started meanwhile
        assert started == [True, True]  # two of three runtimes; the third stays free
        client = asyncio.create_task(niceness_of(batcher, background=False))
        await until(lambda: len(started) >= 3)
        assert started == [True, True, False]  # the client's batch ran at once
        gate.set()
        await asyncio.gather(client, *jobs)
        assert started.count(True) == 4
    finally:
        gate.set()
        await batcher.close()
        pool.close()
