"""Background work (shadow traffic) runs on the pool's lowest-priority threads; serving work,
and a batch mixing both, on the serving threads."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Mapping, Sequence

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


class NicenessRuntime:
    """Answers each row with the niceness of the thread that ran it; `gate` holds runs."""

    inputs = (X,)
    outputs = (Y,)
    providers = ("CPUExecutionProvider",)

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def run(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        self.gate.wait(5)
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
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

        # a batch holding serving and background items runs at the serving priority
        runtime.gate.clear()
        first = asyncio.create_task(niceness_of(batcher, background=False))
        await asyncio.sleep(0.05)  # the first batch is running, held by the gate
        mixed = [
            asyncio.create_task(niceness_of(batcher, background=b)) for b in (True, False, True)
        ]
        await asyncio.sleep(0.05)
        runtime.gate.set()
        assert set(await asyncio.gather(first, *mixed)) == {serving}
    finally:
        await batcher.close()
        pool.close()
