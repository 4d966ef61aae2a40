"""The sync-to-async bridge: N runtime instances of one version, each run on its own thread.

ONNX Runtime releases the GIL while it computes, so the event loop keeps forming the next batch
while a batch runs here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from inferd.runtime.protocol import Array, Feeds, Runtime

RUNTIME_NICENESS = 10
"""How much lower (Linux nice) the runtime threads run than the event loop's thread."""


def _yield_to_event_loop() -> None:
    """Lowers the calling runtime thread's priority below the event loop's. When the cores are
    all busy (overload: runtime threads on every core), the loop still gets the CPU to read
    sockets and answer, refusals included: without this, 429s waited seconds unread at 8x
    the capacity (benchmarks/overload_bench.py). The runtime keeps every cycle the loop does
    not want. ONNX Runtime's own intra-op pool threads (intra_op_threads > 1) keep their
    priority; a single-threaded instance computes on this thread."""
    if sys.platform == "linux":  # elsewhere setpriority would lower the whole process
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), RUNTIME_NICENESS)


class InstancePool:
    """Runs feeds on whichever instance is free. `concurrency` batches may run at once."""

    def __init__(self, instances: Sequence[Runtime], thread_name: str = "inferd-run") -> None:
        if not instances:
            raise ValueError("an instance pool needs at least one instance")
        self._instances = list(instances)
        self._executor = ThreadPoolExecutor(
            max_workers=len(self._instances),
            thread_name_prefix=thread_name,
            initializer=_yield_to_event_loop,
        )
        self._free: asyncio.Queue[Runtime] | None = None

    @property
    def concurrency(self) -> int:
        return len(self._instances)

    @property
    def first(self) -> Runtime:
        return self._instances[0]

    def _free_queue(self) -> asyncio.Queue[Runtime]:
        # Made on first use so that it binds to the running loop, not the one at construction.
        if self._free is None:
            self._free = asyncio.Queue()
            for instance in self._instances:
                self._free.put_nowait(instance)
        return self._free

    async def run(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        free = self._free_queue()
        instance = await free.get()
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._executor, instance.run, feeds, output_names, into
            )
        finally:
            free.put_nowait(instance)

    def run_sync(self, feeds: Feeds, into: Mapping[str, str] | None = None) -> dict[str, Array]:
        """Runs on every instance in turn (warm-up), on the calling thread."""
        result: dict[str, Array] = {}
        for instance in self._instances:
            result = instance.run(feeds, None, into)
        return result

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        for instance in self._instances:
            instance.close()
