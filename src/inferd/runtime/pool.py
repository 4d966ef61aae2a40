"""The sync-to-async bridge: N runtime instances of one version, each run on its own thread.

ONNX Runtime releases the GIL while it computes, so the event loop keeps forming the next batch
while a batch runs here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from inferd.runtime.protocol import Array, Feeds, Runtime


class InstancePool:
    """Runs feeds on whichever instance is free. `concurrency` batches may run at once."""

    def __init__(self, instances: Sequence[Runtime], thread_name: str = "inferd-run") -> None:
        if not instances:
            raise ValueError("an instance pool needs at least one instance")
        self._instances = list(instances)
        self._executor = ThreadPoolExecutor(
            max_workers=len(self._instances), thread_name_prefix=thread_name
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
