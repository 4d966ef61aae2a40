"""The job worker on the in-process store, with routes answered by the test: what it keeps,
what it puts back, when it takes work, and how many jobs it runs at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import orjson
import pytest

from inferd.errors import QueueFullError
from inferd.jobs.callback import Callbacks
from inferd.jobs.record import Job, JobState
from inferd.jobs.store import ProcessJobStore, QueueBound
from inferd.jobs.worker import JobWorker
from inferd.observability.observer import Event, JobEnded, Observer


@dataclass
class Routes:
    """Answers each route call with the next status of `statuses` (200 when none is left)."""

    statuses: list[int] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    running: int = 0
    most_running: int = 0
    hold_s: float = 0.0

    async def __call__(self, route: str, body: bytes, job_id: str) -> tuple[int, bytes]:
        self.calls.append(job_id)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.hold_s)
        finally:
            self.running -= 1
        status = self.statuses.pop(0) if self.statuses else 200
        return status, orjson.dumps({"echo": orjson.loads(body), "status": status})


class Outcomes(Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def observe(self, event: Event) -> None:
        if isinstance(event, JobEnded):
            self.seen.append(event.outcome)


@pytest.fixture
async def rig() -> AsyncIterator[Callable[..., tuple[ProcessJobStore, JobWorker, Outcomes]]]:
    workers: list[JobWorker] = []

    def make(
        routes: Routes,
        may_take: Callable[[], bool] = lambda: True,
        concurrency: int = 1,
        max_attempts: int = 3,
        max_queued: int = 100,
    ) -> tuple[ProcessJobStore, JobWorker, Outcomes]:
        store = ProcessJobStore(QueueBound(max_queued, 10**9), 60)
        outcomes = Outcomes()
        worker = JobWorker(
            store, routes, may_take, outcomes, concurrency, max_attempts, 1.0, Callbacks([])
        )
        workers.append(worker)
        return store, worker, outcomes

    yield make
    for worker in workers:
        await worker.stop(1.0)


async def done(store: ProcessJobStore, job_id: str, timeout_s: float = 5) -> Job:
    async with asyncio.timeout(timeout_s):
        while True:
            job = await store.get(job_id)
            assert job is not None
            if job.done:
                return job
            await asyncio.sleep(0.005)


def job(n: int = 0) -> Job:
    return Job(route="/embed", body=orjson.dumps({"texts": [f"text {n}"]}))


async def test_a_job_runs_and_its_answer_is_kept(rig: Callable[..., tuple]) -> None:
    routes = Routes(statuses=[200, 400])
    store, worker, outcomes = rig(routes)
    worker.start()
    first, second = job(1), job(2)
    await store.submit(first)
    await store.submit(second)
    ok, bad = await done(store, first.id), await done(store, second.id)
    assert ok.state is JobState.SUCCEEDED and ok.status == 200 and ok.attempts == 1
    assert orjson.loads(ok.result or b"")["echo"] == {"texts": ["text 1"]}
    assert bad.state is JobState.FAILED and bad.status == 400  # the route's refusal, kept
    assert outcomes.seen == ["succeeded", "failed"]
    assert ok.view()["result"]["status"] == 200 and "error" in bad.view()


async def test_a_shed_job_goes_back_to_the_queue_and_runs_later(
    rig: Callable[..., tuple],
) -> None:
    routes = Routes(statuses=[429, 503])
    store, worker, outcomes = rig(routes)
    worker.start()
    queued = job()
    await store.submit(queued)
    finished = await done(store, queued.id)
    assert finished.state is JobState.SUCCEEDED and routes.calls == [queued.id] * 3
    assert outcomes.seen == ["requeued", "requeued", "succeeded"]


async def test_a_job_begun_too_often_is_failed_not_run_again(rig: Callable[..., tuple]) -> None:
    routes = Routes()
    store, worker, _ = rig(routes, max_attempts=2)
    stuck = job()
    stuck.attempts = 2  # two workers began it and stopped mid-job
    await store.submit(stuck)
    worker.start()
    failed = await done(store, stuck.id)
    assert failed.state is JobState.FAILED and failed.status == 500 and routes.calls == []
    assert orjson.loads(failed.result or b"")["code"] == 5000


async def test_no_job_is_taken_while_the_server_has_no_room(rig: Callable[..., tuple]) -> None:
    room = False
    routes = Routes()
    store, worker, _ = rig(routes, may_take=lambda: room)
    worker.start()
    waiting = job()
    await store.submit(waiting)
    await asyncio.sleep(0.1)
    assert routes.calls == [] and (await store.get(waiting.id)).state is JobState.QUEUED  # type: ignore[union-attr]
    room = True
    assert (await done(store, waiting.id)).state is JobState.SUCCEEDED


async def test_at_most_concurrency_jobs_run_at_once(rig: Callable[..., tuple]) -> None:
    routes = Routes(hold_s=0.05)
    store, worker, _ = rig(routes, concurrency=2)
    jobs = [job(n) for n in range(6)]
    for queued in jobs:
        await store.submit(queued)
    worker.start()
    for queued in jobs:
        await done(store, queued.id)
    assert routes.most_running == 2


async def test_the_queue_bound_counts_waiting_and_running_jobs() -> None:
    store = ProcessJobStore(QueueBound(2, 10**9), 60)
    await store.submit(job(1))
    await store.submit(job(2))
    with pytest.raises(QueueFullError):
        await store.submit(job(3))
    taken = await store.take("w", 0.1)
    assert taken is not None and await store.depth() == 2  # one running, one waiting
    with pytest.raises(QueueFullError):
        await store.submit(job(4))
    await store.finish(taken, taken.job)
    await store.submit(job(5))


async def test_the_queue_bound_counts_the_bytes_of_the_bodies_waiting_and_running() -> None:
    store = ProcessJobStore(QueueBound(100, 1000), 60)
    big = Job("/embed", b"x" * 600)
    await store.submit(big)
    with pytest.raises(QueueFullError, match="bodies hold"):
        await store.submit(Job("/embed", b"y" * 500))  # 1,100 bytes would be held
    await store.submit(Job("/embed", b"z" * 400))  # exactly the bound
    taken = await store.take("w", 0.1)
    assert taken is not None and taken.job.id == big.id
    with pytest.raises(QueueFullError):
        await store.submit(Job("/embed", b"w"))  # running bodies count too
    await store.finish(taken, taken.job)
    await store.submit(Job("/embed", b"w" * 600))  # its 600 bytes are free again


def test_a_callback_goes_only_to_an_allowed_host() -> None:
    callbacks = Callbacks(["hooks.example.com", "127.0.0.1:9000"])
    callbacks.check("https://hooks.example.com/done")
    callbacks.check("http://127.0.0.1:9000/x")
    for url, words in (
        ("http://127.0.0.1:9001/x", "not allowed"),
        ("http://evil.example/x", "not allowed"),
        ("ftp://hooks.example.com/x", "http or https"),
        ("hooks.example.com/x", "http or https"),
    ):
        with pytest.raises(Exception, match=words):
            callbacks.check(url)
    with pytest.raises(Exception, match="callbacks are off"):
        Callbacks([]).check("http://hooks.example.com/")
