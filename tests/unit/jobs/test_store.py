"""The in-process job store's bounds on kept answers: what a finished job keeps, how many
answers and bytes all keys and one key may hold, and one answer's size."""

from __future__ import annotations

import orjson
import pytest

from inferd.errors import QueueFullError
from inferd.jobs.record import Job, JobState
from inferd.jobs.store import ProcessJobStore, QueueBound, ResultBound, finished


async def run(store: ProcessJobStore, job: Job, answer: bytes) -> Job:
    queued = await store.submit(job)
    delivery = await store.take("w", 0.1)
    assert delivery is not None and delivery.job.id == queued.id
    await store.finish(delivery, finished(delivery.job, JobState.SUCCEEDED, 200, answer))
    kept = await store.get(queued.id)
    assert kept is not None
    return kept


async def test_a_finished_job_keeps_its_answer_not_its_body() -> None:
    store = ProcessJobStore(QueueBound(10, 10**6), 60)
    kept = await run(store, Job(route="/embed", body=b'{"texts": ["a"]}'), b'{"ok": 1}')
    assert kept.body == b"" and kept.result == b'{"ok": 1}' and kept.view()["result"] == {"ok": 1}


async def test_an_answer_over_its_bound_fails_its_job() -> None:
    store = ProcessJobStore(QueueBound(10, 10**6), 60, ResultBound(10, 10**6, 8, 1.0))
    kept = await run(store, Job(route="/embed", body=b"{}"), orjson.dumps({"big": "x" * 20}))
    assert kept.state is JobState.FAILED and kept.status == 400
    assert kept.view()["error"]["code"] == 4005 and "jobs_max_result_mb" in kept.view()["reason"]


async def test_kept_answers_are_bounded_for_all_keys_and_for_each() -> None:
    store = ProcessJobStore(QueueBound(100, 10**6), 60, ResultBound(4, 10**6, 10**6, 0.5))
    for _ in range(2):
        await run(store, Job(route="/embed", body=b"{}", owner="a"), b"{}")
    with pytest.raises(QueueFullError, match="this API key's kept job answers"):
        await store.submit(Job(route="/embed", body=b"{}", owner="a"))
    for _ in range(2):
        await run(store, Job(route="/embed", body=b"{}", owner="b"), b"{}")
    with pytest.raises(QueueFullError, match="the kept job answers") as refused:
        await store.submit(Job(route="/embed", body=b"{}", owner="c"))
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s > 50


async def test_without_keys_one_owner_may_hold_every_answer() -> None:
    store = ProcessJobStore(QueueBound(100, 10**6), 60, ResultBound(3, 10**6, 10**6, 0.5))
    for _ in range(3):
        await run(store, Job(route="/embed", body=b"{}"), b"{}")
    with pytest.raises(QueueFullError, match="the kept job answers"):
        await store.submit(Job(route="/embed", body=b"{}"))


async def test_an_answer_that_does_not_fit_fails_its_job_with_5030() -> None:
    store = ProcessJobStore(QueueBound(100, 10**6), 60, ResultBound(100, 30, 100, 1.0))
    first = await run(store, Job(route="/embed", body=b"{}"), orjson.dumps({"a": "x" * 20}))
    assert first.state is JobState.SUCCEEDED
    second = await run(store, Job(route="/embed", body=b"{}"), orjson.dumps({"a": "y" * 20}))
    assert second.state is JobState.FAILED and second.view()["error"]["code"] == 5030


def test_a_job_record_keeps_its_submitters_traceparent_through_the_store_fields() -> None:
    from inferd.jobs.record import Job

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job = Job(route="/embed", body=b"{}", callback_url="http://h/x", traceparent=parent)
    fields = {k.encode(): v for k, v in job.to_fields().items()}
    assert Job.from_fields(fields).traceparent == parent
    untraced = {k.encode(): v for k, v in Job(route="/embed", body=b"{}").to_fields().items()}
    assert Job.from_fields(untraced).traceparent is None
