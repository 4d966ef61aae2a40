"""The job worker of one process: takes jobs from the store when interactive traffic leaves
room, runs each through its route, keeps the answer, and calls the job's callback.

Lower priority than interactive requests, three ways: it takes a job only while `may_take`
says the server has room (the server's rule: ready, not draining, no interactive request
waiting in any queue); it runs at most `concurrency` jobs at once; and a job's work is marked
background (inferd.runtime.priority), so its batches run on the runtimes' lowest-priority
threads when they hold only job items.

A job whose route answers 429 (shedding) or 503 (not ready, draining) goes back to the end
of the queue, as it is; any other answer is its result (a 4xx is the job's failure, kept
like a success). A job begun `max_attempts` times (each time its worker stopped mid-job) is
failed with 5000 rather than tried forever.

A store that cannot be reached (`UnavailableError`) is the store's to log, once (its
`reach`): the worker only waits, longer each time up to `STORE_PAUSE_MAX_S`, and a job that
finished meanwhile keeps its answer in memory and writes it once the store answers again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import orjson

from inferd.errors import ErrorCode, UnavailableError, error_body
from inferd.jobs.callback import Callbacks
from inferd.jobs.record import Job, JobState
from inferd.jobs.store import Delivery, JobStore, finished
from inferd.observability.observer import JobEnded, JobsWaiting, Observer, notify
from inferd.runtime import priority

log = logging.getLogger(__name__)

RouteRunner = Callable[[str, bytes, str], Awaitable[tuple[int, bytes]]]
"""(route, JSON body, job id) -> (HTTP status, JSON answer): runs one inference route."""

RETRY_STATUSES = (429, 503)
IDLE_POLL_S = 0.005
"""How often a worker that may not take a job looks again."""
TAKE_WAIT_S = 0.5
REQUEUE_PAUSE_S = 0.2
"""After putting a shed job back: the pause before this worker takes another."""
DEPTH_EVERY_S = 1.0
"""How often the queue's depth is read for the metrics (at most)."""
STORE_PAUSE_S = 0.25
STORE_PAUSE_MAX_S = 2.0
"""The pauses before trying an unreachable store again: doubling from the first to the last."""
ERROR_PAUSE_S = 5.0
"""The pause after an unexpected error from the store (logged each time: at most this often)."""


def worker_name() -> str:
    """Unique among the processes sharing a stream: host, process, and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class JobWorker:
    def __init__(
        self,
        store: JobStore,
        run_route: RouteRunner,
        may_take: Callable[[], bool],
        observer: Observer,
        concurrency: int,
        max_attempts: int,
        keep_every_s: float,
        callbacks: Callbacks,
    ) -> None:
        self.name = worker_name()
        self._store = store
        self._run_route = run_route
        self._may_take = may_take
        self._observer = observer
        self._concurrency = concurrency
        self._max_attempts = max_attempts
        self._keep_every_s = keep_every_s
        self._callbacks = callbacks
        self._running: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._census_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def running(self) -> int:
        return len(self._running)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop_task = loop.create_task(self._loop(), name="inferd-jobs")
        self._census_task = loop.create_task(self._census(), name="inferd-jobs-census")

    async def stop(self, timeout_s: float) -> None:
        """Takes no more jobs; waits up to `timeout_s` for the running ones (one cut off
        stays in a shared store, for another worker)."""
        self._stopping = True
        for task in (self._loop_task, self._census_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._running:
            _, left = await asyncio.wait(self._running, timeout=timeout_s)
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
        await self._callbacks.close()

    async def _loop(self) -> None:
        pause = STORE_PAUSE_S
        while not self._stopping:
            if len(self._running) >= self._concurrency or not self._may_take():
                await asyncio.sleep(IDLE_POLL_S)
                continue
            try:
                delivery = await self._store.take(self.name, TAKE_WAIT_S)
            except UnavailableError:  # the store logged it, once
                await asyncio.sleep(pause)
                pause = min(pause * 2, STORE_PAUSE_MAX_S)
                continue
            except Exception:
                log.exception(f"the job store could not be read; trying again in {ERROR_PAUSE_S} s")
                await asyncio.sleep(ERROR_PAUSE_S)
                continue
            pause = STORE_PAUSE_S
            if delivery is None:
                continue
            task = asyncio.get_running_loop().create_task(self._run(delivery))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _census(self) -> None:
        """Reads the queue's depth for the metrics every `DEPTH_EVERY_S`, busy or not (a
        shared store also checks then that it still holds its data)."""
        while not self._stopping:
            try:
                notify(self._observer, JobsWaiting(await self._store.depth()))
            except UnavailableError:
                pass  # the store logged it, once
            except Exception:
                log.exception("the job queue's depth could not be read")
                await asyncio.sleep(ERROR_PAUSE_S)
            await asyncio.sleep(DEPTH_EVERY_S)

    async def _run(self, delivery: Delivery) -> None:
        priority.background()  # this task's batches: the runtimes' background threads
        job = delivery.job
        started = time.perf_counter()
        keeper = asyncio.get_running_loop().create_task(self._keep(delivery))
        try:
            if job.attempts > self._max_attempts:
                status, answer = _internal(
                    f"the job was begun {job.attempts - 1} times and never finished: each "
                    "worker stopped mid-job"
                )
            else:
                status, answer = await self._answer(job)
            if status in RETRY_STATUSES and not self._stopping:
                await self._until_stored(self._store.requeue, delivery)
                notify(self._observer, JobEnded("requeued", time.perf_counter() - started))
                await asyncio.sleep(REQUEUE_PAUSE_S)
                return
            state = JobState.SUCCEEDED if status < 400 else JobState.FAILED
            done = finished(job, state, status, answer)
            await self._until_stored(self._store.finish, delivery, done)
        except asyncio.CancelledError:
            raise  # stopped: the job stays in a shared store for another worker
        except UnavailableError:
            return  # stopped while the store was unreachable: the job stays in the queue
        except Exception:
            log.exception("a job could not be recorded", extra={"job_id": job.id})
            return
        finally:
            keeper.cancel()
        seconds = time.perf_counter() - started
        notify(self._observer, JobEnded(state.value, seconds))
        log.info(
            "job finished",
            extra={
                "job_id": job.id,
                "route": job.route,
                "state": state.value,
                "status": status,
                "attempts": job.attempts,
                "total_ms": round(seconds * 1000, 3),
            },
        )
        if job.callback_url is not None:
            self._callbacks.send(job.callback_url, done)

    async def _until_stored(
        self, write: Callable[..., Awaitable[None]], delivery: Delivery, *args: Job
    ) -> None:
        """`write(delivery, *args)`, again while the store cannot be reached (the worker's claim
        on the job lapses meanwhile, so another worker may run it too; its answer is the
        same). Given up when the worker stops: the job stays in the queue for a worker."""
        pause = STORE_PAUSE_S
        while True:
            try:
                await write(delivery, *args)
                return
            except UnavailableError:
                if self._stopping:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, STORE_PAUSE_MAX_S)

    async def _answer(self, job: Job) -> tuple[int, bytes]:
        try:
            return await self._run_route(job.route, job.body, job.id)
        except Exception:  # the route answers its own errors; this is a defect of ours
            log.exception(
                "a job's route failed outside its error handling", extra={"job_id": job.id}
            )
            return _internal("internal error (the log has the details under the job id)")

    async def _keep(self, delivery: Delivery) -> None:
        while True:
            await asyncio.sleep(self._keep_every_s)
            try:
                await self._store.keep(delivery)
            except UnavailableError:
                continue  # the store logged it, once
            except Exception:
                log.warning(
                    "could not renew a running job's claim", extra={"job_id": delivery.job.id}
                )


def _internal(message: str) -> tuple[int, bytes]:
    return 500, orjson.dumps(error_body(ErrorCode.INTERNAL, message))
