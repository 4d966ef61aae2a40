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

from inferd.batching import DynamicBatcher, build_layout, fairness
from inferd.clients import Client, client_scope
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


async def test_a_flooding_client_s_batches_yield_the_cores_to_a_light_client_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While one client floods a queue beside a lighter one (and for `LOPSIDED_MEMORY_S`
    after), the flood's batches run below the serving threads, in the idle class (a light
    client's batch beside them gets the core); the light client's batch, and the flood's
    once it has long been alone, at the serving priority."""
    monkeypatch.setattr(fairness, "LOPSIDED_MEMORY_S", 0.2)
    runtime = NicenessRuntime()
    pool = InstancePool([runtime, NicenessRuntime(), NicenessRuntime()], cores=[1, 1, 1])
    layout = build_layout([X], [Y], {}, batched=True)
    batcher = DynamicBatcher(layout, batcher_settings(2, concurrency=3), pool.run)
    batcher.start()
    base = os.getpriority(os.PRIO_PROCESS, 0)
    serving = max(base, priority.SERVING_NICENESS)
    yielding = max(base, priority.YIELDING_NICENESS)
    flood, polite = Client("flood"), Client("polite")

    async def niceness(client: Client) -> float:
        with client_scope(client):
            out = await batcher.submit({"x": np.zeros((1, 1), np.float32)}, 1)
        return float(out["y"][0, 0])

    try:
        assert await niceness(flood) == serving  # a lone run measured, the flood alone
        assert set(await asyncio.gather(*(niceness(flood) for _ in range(8)))) == {serving}
        gates = [pool.instances[i].gate for i in range(3)]  # type: ignore[attr-defined]
        for gate in gates:
            gate.clear()
        flooding = [asyncio.create_task(niceness(flood)) for _ in range(40)]
        await asyncio.sleep(0.05)  # the flood's first batches hold the runtimes
        light = asyncio.create_task(niceness(polite))
        await asyncio.sleep(0.05)
        for gate in gates:
            gate.set()
        assert await light == serving
        seen = await asyncio.gather(*flooding)
        assert yielding in seen, seen  # its batches formed beside the light client's item
        runs = [run for r in pool.instances for run in r.runs]  # type: ignore[attr-defined]
        # in the idle class: the light client's batch beside them gets the core
        assert {policy for nice, policy, _ in runs if nice == yielding} == {os.SCHED_IDLE}
        assert {policy for nice, policy, _ in runs if nice == serving} == {os.SCHED_OTHER}
        await asyncio.sleep(0.3)
        assert await niceness(flood) == serving  # alone, past the lopsided memory
    finally:
        for gate in gates:
            gate.set()
        await batcher.close()
        pool.close()
