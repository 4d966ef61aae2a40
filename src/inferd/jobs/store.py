"""Where jobs wait and their answers are kept: the `JobStore` protocol, and the store inside
one process (used when no Redis URL is configured: jobs then live and die with the process).

`take` hands a job to one worker and marks it running; `finish` keeps its answer for the
time to live and removes it from the queue; `requeue` puts it back at the end (its route was
shedding or draining); `keep` tells the store the worker still runs it (a shared store hands
a job whose worker stopped telling to another worker).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Protocol

from inferd.errors import QueueFullError
from inferd.jobs.record import Job, JobState


@dataclass(frozen=True)
class QueueBound:
    """The queue's bound: jobs waiting and running, and the bytes of their bodies (a body is
    at most the server's `max_body_bytes`, so a count alone would let a queue hold that many
    times as much)."""

    jobs: int
    body_bytes: int

    def refusal(self, jobs: int, held_bytes: int, adding: int) -> QueueFullError | None:
        """The 4290 for one more job of `adding` bytes, or None when it fits."""
        if jobs >= self.jobs:
            return QueueFullError(
                f"the job queue is full ({self.jobs} jobs); retry later", retry_after_s=1.0
            )
        if held_bytes + adding > self.body_bytes:
            return QueueFullError(
                f"the job queue is full: its jobs' bodies hold {held_bytes / 1e6:.1f} MB of "
                f"{self.body_bytes / 1e6:.1f} MB; retry later",
                retry_after_s=1.0,
            )
        return None


@dataclass(frozen=True)
class Delivery:
    job: Job
    """The job as it was when taken (state running, attempts counted)."""
    ticket: str
    """The store's handle on its place in the queue."""


class JobStore(Protocol):
    kind: str
    """"redis" or "process", for logs and metrics."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def submit(self, job: Job) -> None:
        """Queues it; 4290 when the queue is at its bound (`QueueBound`)."""

    async def get(self, job_id: str) -> Job | None: ...
    async def take(self, worker: str, wait_s: float) -> Delivery | None:
        """The next job for `worker` (one whose worker stopped first), waiting at most
        `wait_s` for one; None when none came."""

    async def keep(self, delivery: Delivery) -> None: ...
    async def finish(self, delivery: Delivery, job: Job) -> None: ...
    async def requeue(self, delivery: Delivery) -> None: ...
    async def depth(self) -> int:
        """Jobs waiting or running."""


def finished(job: Job, state: JobState, status: int, result: bytes) -> Job:
    return replace(job, state=state, status=status, result=result, finished_at=time.time())


class ProcessJobStore:
    """Jobs in this process's memory: nothing is shared, and a restart loses them."""

    kind = "process"

    def __init__(self, bound: QueueBound, result_ttl_s: float) -> None:
        self._bound = bound
        self._bytes = 0
        """The bodies of the jobs waiting and running."""
        self._ttl_s = result_ttl_s
        self._jobs: dict[str, Job] = {}
        self._waiting: deque[str] = deque()
        self._running = 0
        self._finished: deque[tuple[float, str]] = deque()
        """(finished at, id), oldest first: what `_expire` drops once past the time to live."""
        self._arrived = asyncio.Event()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def submit(self, job: Job) -> None:
        self._expire()
        refusal = self._bound.refusal(
            len(self._waiting) + self._running, self._bytes, len(job.body)
        )
        if refusal is not None:
            raise refusal
        self._bytes += len(job.body)
        self._jobs[job.id] = job
        self._waiting.append(job.id)
        self._arrived.set()

    async def get(self, job_id: str) -> Job | None:
        self._expire()
        return self._jobs.get(job_id)

    async def take(self, worker: str, wait_s: float) -> Delivery | None:
        if not self._waiting:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), wait_s)
            except TimeoutError:
                return None
            if not self._waiting:
                return None
        job_id = self._waiting.popleft()
        job = replace(
            self._jobs[job_id],
            state=JobState.RUNNING,
            started_at=time.time(),
            attempts=self._jobs[job_id].attempts + 1,
            worker=worker,
        )
        self._jobs[job_id] = job
        self._running += 1
        return Delivery(job, job_id)

    async def keep(self, delivery: Delivery) -> None:
        return None  # one process: nobody else could take it

    async def finish(self, delivery: Delivery, job: Job) -> None:
        self._running -= 1
        self._bytes -= len(delivery.job.body)
        self._jobs[job.id] = job
        self._finished.append((job.finished_at or time.time(), job.id))

    async def requeue(self, delivery: Delivery) -> None:
        self._running -= 1
        job = delivery.job
        self._jobs[job.id] = replace(job, state=JobState.QUEUED)
        self._waiting.append(job.id)
        self._arrived.set()

    async def depth(self) -> int:
        return len(self._waiting) + self._running

    def _expire(self) -> None:
        cutoff = time.time() - self._ttl_s
        while self._finished and self._finished[0][0] < cutoff:
            self._jobs.pop(self._finished.popleft()[1], None)
