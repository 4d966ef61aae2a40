"""The sync-to-async bridge: N runtime instances of one version, each run on its own thread.

ONNX Runtime releases the GIL while it computes, so the event loop keeps forming the next batch
while a batch runs here.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from inferd.runtime import priority
from inferd.runtime.protocol import Array, Feeds, Runtime


class InstancePool:
    """Runs feeds on whichever instance is free. `concurrency` batches may run at once."""

    def __init__(self, instances: Sequence[Runtime], thread_name: str = "inferd-run") -> None:
        if not instances:
            raise ValueError("an instance pool needs at least one instance")
        self._instances = list(instances)
        self._thread_name = thread_name
        self._executor = self._threads(priority.SERVING_NICENESS, thread_name)
        self._background: ThreadPoolExecutor | None = None
        self._free: asyncio.Queue[Runtime] | None = None

    def _threads(self, niceness: int, name: str) -> ThreadPoolExecutor:
        """One thread per instance, below the event loop: when the cores are all busy
        (overload), the loop still gets the CPU to read sockets and answer, refusals included
        (without it, 429s waited seconds unread at 8x the capacity:
        benchmarks/overload_bench.py). ONNX Runtime's own intra-op threads (an instance with
        intra_op_threads > 1) keep their priority; a single-threaded instance computes on
        this thread."""
        return ThreadPoolExecutor(
            max_workers=len(self._instances),
            thread_name_prefix=name,
            initializer=functools.partial(priority.lower_thread, niceness),
        )

    def _executor_for_now(self) -> ThreadPoolExecutor:
        """The background threads for background work (inferd.runtime.priority), made on
        first use; the serving threads otherwise."""
        if not priority.in_background():
            return self._executor
        if self._background is None:
            self._background = self._threads(
                priority.BACKGROUND_NICENESS, f"{self._thread_name}-background"
            )
        return self._background

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
                self._executor_for_now(), instance.run, feeds, output_names, into
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
        if self._background is not None:
            self._background.shutdown(wait=True, cancel_futures=True)
        for instance in self._instances:
            instance.close()
