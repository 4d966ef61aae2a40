"""The threads an instance pool runs its batches on, one set for each priority
(inferd.runtime.priority): serving threads below the event loop, yielding threads for a
flooding client's batches, background threads for shadow traffic and jobs; the last two made
on first use."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

from inferd.runtime import priority


class RunThreads:
    def __init__(self, count: int, name: str, hold_cores: bool) -> None:
        """`count` threads a priority (one per instance); `hold_cores`: whether the
        instances compute on these threads' cores (a GPU instance's only wait on a device)."""
        self._count = count
        self._name = name
        self._hold_cores = hold_cores
        # a thread that computes runs below the event loop; one that waits on a device (a
        # GPU instance's: it holds no cores) at the loop's level: its CPU is a few handoffs
        # a batch, and niced it waited for the core behind the tokenizer's threads while
        # its device stood idle (an emulated H200 served 0.72 of its rate niced, 0.83 not)
        self._serving = self._threads(priority.SERVING_NICENESS if hold_cores else 0, name)
        self._background: ThreadPoolExecutor | None = None
        self._yielding: ThreadPoolExecutor | None = None
        """A flooding client's batches' threads (priority.YIELDING_NICENESS), for instances
        that hold cores (on a device the flood takes no core from the others)."""

    def _threads(self, niceness: int, name: str) -> ThreadPoolExecutor:
        """One thread per instance, below the event loop: when the cores are all busy
        (overload), the loop still gets the CPU to read sockets and answer, refusals included
        (without it, 429s waited seconds unread at 8x the capacity:
        benchmarks/overload_bench.py). ONNX Runtime's own intra-op threads (an instance with
        intra_op_threads > 1) keep their priority; a single-threaded instance computes on
        this thread."""
        return ThreadPoolExecutor(
            max_workers=self._count,
            thread_name_prefix=name,
            initializer=functools.partial(priority.lower_thread, niceness),
        )

    def for_now(self) -> ThreadPoolExecutor:
        """The background threads for background work (inferd.runtime.priority), or the
        yielding threads for a flooding client's batch, made on first use; the serving threads
        otherwise."""
        if not priority.in_background():
            if not priority.yielding() or not self._hold_cores:
                return self._serving
            if self._yielding is None:
                self._yielding = self._threads(priority.YIELDING_NICENESS, f"{self._name}-yielding")
            return self._yielding
        if self._background is None:
            self._background = self._threads(
                priority.BACKGROUND_NICENESS, f"{self._name}-background"
            )
        return self._background

    def shutdown(self) -> None:
        for threads in (self._serving, self._background, self._yielding):
            if threads is not None:
                threads.shutdown(wait=True, cancel_futures=True)
