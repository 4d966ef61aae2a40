"""Where jobs wait and their answers are kept: the `JobStore` protocol, and the store inside
one process (used when no Redis URL is configured: jobs then live and die with the process).

`take` hands a job to one worker and marks it running; `finish` keeps its answer for the
time to live (not its request body) and removes it from the queue; `requeue` puts it back at
the end (its route was shedding or draining); `keep` tells the store the worker still runs it
(a shared store hands a job whose worker stopped telling to another worker).

Two bounds: the queue's (`QueueBound`: jobs waiting and running, and their bodies' bytes) and
the kept answers' (`ResultBound`: how many, their bytes, one answer's bytes, and the share of
each one API key may hold). Both refuse new jobs with 4290 rather than drop accepted work.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Protocol

import orjson

from inferd.errors import ErrorCode, QueueFullError, error_body
from inferd.jobs.reach import Reach
from inferd.jobs.record import Job, JobState

ANONYMOUS = "-"
"""The owner of the jobs of a server without API keys (no per-key bound applies)."""


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
class ResultBound:
    """What finished jobs' answers may hold: `results` answers and `total_bytes` of them in
    all, and `key_share` of each for one API key (when the server has keys); one answer at most
    `answer_bytes` (a larger one fails its job). A job is refused (4290) while its key, or all
    keys, hold as much; answers leave when their time to live runs out."""

    results: int
    total_bytes: int
    answer_bytes: int
    key_share: float

    @classmethod
    def unbounded(cls) -> ResultBound:
        return cls(2**62, 2**62, 2**62, 1.0)

    def for_key(self, owner: str) -> tuple[int, int]:
        """(answers, bytes) one owner may hold; (0, 0): no bound of its own."""
        if owner == ANONYMOUS or self.key_share >= 1.0:
            return 0, 0
        return max(1, int(self.results * self.key_share)), int(self.total_bytes * self.key_share)

    def refusal(
        self, held: int, held_bytes: int, retry_after_s: float, owner: str | None = None
    ) -> QueueFullError | None:
        """The 4290 for one more job while `held` answers of `held_bytes` are kept (all of
        them, or, given `owner`, that key's), or None."""
        results, total = (self.results, self.total_bytes) if owner is None else self.for_key(owner)
        whose = "the" if owner is None else "this API key's"
        if held >= results:
            return QueueFullError(
                f"{whose} kept job answers are at their bound ({results}); retry once some expire",
                retry_after_s=retry_after_s,
            )
        if held_bytes >= total:
            return QueueFullError(
                f"{whose} kept job answers hold {held_bytes / 1e6:.1f} MB of {total / 1e6:.1f} "
                "MB; retry once some expire",
                retry_after_s=retry_after_s,
            )
        return None

    def kept(self, job: Job) -> Job:
        """`job` as it may be kept: failed with 4005 when its answer is over `answer_bytes`."""
        size = len(job.result or b"")
        if size <= self.answer_bytes:
            return job
        return replace(
            job,
            state=JobState.FAILED,
            status=400,
            result=error_json(
                ErrorCode.TOO_MANY_ITEMS,
                f"the job's answer is {size / 1e6:.1f} MB, over the "
                f"{self.answer_bytes / 1e6:.1f} MB a job's answer may hold "
                "(jobs_max_result_mb): ask for less in one job",
            ),
        )

    def no_room(self, job: Job) -> Job:
        """`job` failed because the kept answers had no room left for its answer."""
        return replace(
            job,
            state=JobState.FAILED,
            status=503,
            result=error_json(
                ErrorCode.UNAVAILABLE,
                "the job store had no room left for this job's answer (jobs_max_results_mb); "
                "submit it again later",
            ),
        )


def error_json(code: ErrorCode, message: str) -> bytes:
    return orjson.dumps(error_body(code, message))


@dataclass(frozen=True)
class Delivery:
    job: Job
    """The job as it was when taken (state running, attempts counted)."""
    ticket: str
    """The store's handle on its place in the queue."""


class JobStore(Protocol):
    kind: str
    """"redis" or "process", for logs and metrics."""
    reach: Reach

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def submit(self, job: Job) -> Job:
        """Queues it (under the id the store gives it: the job as queued); 4290 when the queue
        or the kept answers are at their bound; 5030 when the store is unreachable."""

    async def get(self, job_id: str) -> Job | None:
        """The job; a lost record (`Job.lost`) for one the store issued and lost; None for
        one it does not know (never issued, or expired)."""

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

    def __init__(
        self,
        bound: QueueBound,
        result_ttl_s: float,
        results: ResultBound | None = None,
    ) -> None:
        self.reach = Reach()
        self._bound = bound
        self._results = results or ResultBound.unbounded()
        self._held: dict[str, list[int]] = {}
        """Per owner: [answers kept, their bytes]; ALL: every owner's."""
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

    async def submit(self, job: Job) -> Job:
        self._expire()
        refusal = self._bound.refusal(
            len(self._waiting) + self._running, self._bytes, len(job.body)
        ) or self._results_refusal(job.owner or ANONYMOUS)
        if refusal is not None:
            raise refusal
        self._bytes += len(job.body)
        self._jobs[job.id] = job
        self._waiting.append(job.id)
        self._arrived.set()
        return job

    def _results_refusal(self, owner: str) -> QueueFullError | None:
        retry_s = self._finished[0][0] + self._ttl_s - time.time() if self._finished else 1.0
        held, held_bytes = self._held.get(_ALL, [0, 0])
        refusal = self._results.refusal(held, held_bytes, retry_s)
        if refusal is None and self._results.for_key(owner) != (0, 0):
            held, held_bytes = self._held.get(owner, [0, 0])
            refusal = self._results.refusal(held, held_bytes, retry_s, owner)
        return refusal

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
        self._expire()
        self._running -= 1
        self._bytes -= len(delivery.job.body)
        owner = job.owner or ANONYMOUS
        job = self._results.kept(replace(job, body=b""))
        size = len(job.result or b"")
        held = self._held.get(_ALL, [0, 0])[1]
        mine_bytes = self._results.for_key(owner)[1]
        if held + size > self._results.total_bytes or (
            mine_bytes and self._held.get(owner, [0, 0])[1] + size > mine_bytes
        ):
            job = self._results.no_room(job)
            size = len(job.result or b"")
        self._jobs[job.id] = job
        for who in (_ALL, owner):
            counts = self._held.setdefault(who, [0, 0])
            counts[0] += 1
            counts[1] += size
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
            job = self._jobs.pop(self._finished.popleft()[1], None)
            if job is None:
                continue
            owner = job.owner or ANONYMOUS
            for who in (_ALL, owner):
                counts = self._held[who]
                counts[0] -= 1
                counts[1] -= len(job.result or b"")
                if counts[0] <= 0 and who != _ALL:
                    del self._held[who]


_ALL = ""
"""The key of every owner's total in `ProcessJobStore._held` (no owner hash is empty)."""
