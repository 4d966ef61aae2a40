"""Jobs on Redis Streams, shared by every inferd process pointed at the same Redis.

Keys, all under one hash tag so that a Redis Cluster keeps them in one slot:
`{prefix}:stream`, the queue (one entry per job waiting or running, holding its id and the
size of its body), read by the consumer group `inferd`; `{prefix}:bytes`, the bodies' total
(the queue's second bound); `{prefix}:job:<id>`, a hash with the job's record, which expires
`result_ttl_s` after the job finished (its body is dropped then); `{prefix}:results` and
`{prefix}:held`, the kept answers and their totals (`redis_scripts`); `{prefix}:epoch`, the
secret that says the store is the one the jobs were written to (`epoch`).

Nothing is lost while Redis keeps its data: an entry is acknowledged and deleted only with the
job's answer written (one script). A worker that stops mid-job leaves its entry pending; after
`claim_after_s` without news from it, the next worker to look claims it (XAUTOCLAIM) and runs
the job again. A worker running a job tells the stream so every third of that time (`keep`).

A Redis that comes back without its data is found by the epoch (every second, and on any miss)
or by NOGROUP: the stream and group are made again, a new epoch written, a warning logged once
with the jobs the store held when last read, and the old epoch remembered, so that `get`
answers its jobs as lost (`redis_epoch`). A Redis that cannot be reached is `UnavailableError`
(503, 5030) for the caller and one warning for the log (`redis_reach`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from inferd.errors import UnavailableError
from inferd.jobs import redis_scripts
from inferd.jobs.epoch import Epoch
from inferd.jobs.reach import Reach
from inferd.jobs.record import Job, JobState
from inferd.jobs.redis_epoch import RedisEpoch
from inferd.jobs.redis_reach import reaching
from inferd.jobs.store import ANONYMOUS, Delivery, QueueBound, ResultBound

GROUP = "inferd"
CONNECT_TIMEOUT_S = 2.0
SOCKET_TIMEOUT_S = 10.0
"""Above the longest blocking read (`take`'s wait)."""


class RedisJobStore:
    kind = "redis"

    def __init__(
        self,
        url: str,
        prefix: str,
        bound: QueueBound,
        result_ttl_s: float,
        claim_after_s: float,
        results: ResultBound | None = None,
        on_lost: Callable[[int], None] = lambda count: None,
    ) -> None:
        # one quick retry: a pooled connection to a Redis that restarted fails once, then
        # reconnects; more retries only delay the 503 of a Redis that is down
        self._client: aioredis.Redis = aioredis.from_url(
            url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=SOCKET_TIMEOUT_S,
            retry=Retry(NoBackoff(), 1),
        )
        self.reach = Reach()
        tag = self._tag = f"{{{prefix}}}"
        self._stream = f"{tag}:stream"
        self._bytes = f"{tag}:bytes"
        self._results_key = f"{tag}:results"
        self._held = f"{tag}:held"
        self._bound = bound
        self._results = results or ResultBound.unbounded()
        self._ttl_s = result_ttl_s
        self._ttl_ms = int(result_ttl_s * 1000)
        self._claim_ms = int(claim_after_s * 1000)
        self._submit = self._client.register_script(redis_scripts.SUBMIT)
        self._finish = self._client.register_script(redis_scripts.FINISH)
        self._drop = self._client.register_script(redis_scripts.DROP)
        self._epoch = RedisEpoch(self._client, self._stream, GROUP, f"{tag}:epoch", prefix, on_lost)

    def _key(self, job_id: str) -> str:
        return f"{self._tag}:job:{job_id}"

    async def open(self) -> None:
        """Reaches Redis (failing start-up when it cannot), makes the stream and group if
        needed, and reads (or writes) the epoch."""
        await self._epoch.make()

    async def close(self) -> None:
        await self._client.aclose()

    async def submit(self, job: Job) -> Job:
        for _ in range(2):  # a second time when the epoch changed under it
            async with reaching(self.reach):
                epoch = self._epoch.current or await self._epoch.make()
                queued = await self._submit_in(job, epoch)
                if queued is not None:
                    return queued
                await self._epoch.make()
        raise UnavailableError("the job store changed twice while queuing", retry_after_s=1.0)

    async def _submit_in(self, job: Job, epoch: Epoch) -> Job | None:
        queued = Job(
            route=job.route,
            body=job.body,
            callback_url=job.callback_url,
            id=epoch.issue(time.time()),
            owner=job.owner,
            traceparent=job.traceparent,
        )
        fields: list[Any] = []
        for name, value in queued.to_fields().items():
            fields += [name, value]
        owner = job.owner or ANONYMOUS
        mine_n, mine_bytes = self._results.for_key(owner)
        size = len(job.body)
        status, count, held, retry_ms = await self._submit(
            keys=[
                self._stream,
                self._key(queued.id),
                self._bytes,
                self._epoch.key,
                self._results_key,
                self._held,
            ],
            args=[
                self._bound.jobs,
                self._bound.body_bytes,
                size,
                queued.id,
                epoch.secret,
                owner,
                self._results.results,
                self._results.total_bytes,
                mine_n,
                mine_bytes,
                *fields,
            ],
        )
        status = int(status)
        if status == 1:
            return queued
        if status == -1:
            return None
        if status == 0:
            refusal = self._bound.refusal(int(count), int(held), size)
        else:
            refusal = self._results.refusal(
                int(count), int(held), int(retry_ms) / 1000, owner if status == 3 else None
            )
        raise refusal or RuntimeError(f"refused in Redis ({status})")

    async def get(self, job_id: str) -> Job | None:
        async with reaching(self.reach):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.hgetall(self._key(job_id))
                pipe.get(self._epoch.key)
                fields, secret = await pipe.execute()
            if fields and b"route" in fields:
                return Job.from_fields(fields)
            await self._epoch.check(secret)
        return self._epoch.lost(job_id, self._ttl_s)

    async def take(self, worker: str, wait_s: float) -> Delivery | None:
        async with reaching(self.reach):
            try:
                entry = await self._take_entry(worker, wait_s)
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                await self._epoch.make()  # the stream or its group is gone
                return None
            if entry is None:
                return None
            return await self._begin(worker, entry)

    async def _take_entry(
        self, worker: str, wait_s: float
    ) -> tuple[bytes, dict[bytes, bytes]] | None:
        entry = await self._claim_stale(worker)
        if entry is not None:
            return entry
        read: Any = await self._client.xreadgroup(
            GROUP, worker, {self._stream: ">"}, count=1, block=max(1, int(wait_s * 1000))
        )
        if not read:
            return None
        first: tuple[bytes, dict[bytes, bytes]] = read[0][1][0]
        return first

    async def _begin(self, worker: str, entry: tuple[bytes, dict[bytes, bytes]]) -> Delivery | None:
        ticket, fields = entry[0].decode(), entry[1]
        job_id = fields[b"id"].decode()
        key = self._key(job_id)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, "attempts", 1)
            pipe.hset(
                key,
                mapping={
                    "state": JobState.RUNNING.value,
                    "started_at": time.time(),
                    "worker": worker,
                },
            )
            pipe.hgetall(key)
            *_, record = await pipe.execute()
        if b"route" not in record:  # its record is gone: nothing to run
            await self._client.delete(key)
            await self._drop(
                keys=[self._stream, self._bytes], args=[ticket, int(fields.get(b"bytes", b"0"))]
            )
            return None
        return Delivery(Job.from_fields(record), ticket)

    async def _claim_stale(self, worker: str) -> tuple[bytes, dict[bytes, bytes]] | None:
        """An entry whose worker has not been heard of for `claim_after_s`, now `worker`'s."""
        reply: Any = await self._client.xautoclaim(
            self._stream, GROUP, worker, min_idle_time=self._claim_ms, start_id="0-0", count=1
        )
        claimed = reply[1]
        for entry in claimed:
            if entry[1]:
                return entry[0], entry[1]
        return None

    async def keep(self, delivery: Delivery) -> None:
        async with reaching(self.reach):
            await self._client.xclaim(
                self._stream,
                GROUP,
                delivery.job.worker or "",
                min_idle_time=0,
                message_ids=[delivery.ticket],
                justid=True,
            )

    async def finish(self, delivery: Delivery, job: Job) -> None:
        job = self._results.kept(job)
        async with reaching(self.reach):
            if not await self._finish_as(delivery, job, force=False):
                await self._finish_as(delivery, self._results.no_room(job), force=True)

    async def _finish_as(self, delivery: Delivery, job: Job, force: bool) -> bool:
        fields: list[Any] = []
        for name, value in job.to_fields().items():
            if name != "body":
                fields += [name, value]
        owner = job.owner or ANONYMOUS
        kept = await self._finish(
            keys=[self._stream, self._key(job.id), self._bytes, self._results_key, self._held],
            args=[
                delivery.ticket,
                len(delivery.job.body),
                self._ttl_ms,
                job.id,
                owner,
                len(job.result or b""),
                self._results.total_bytes,
                self._results.for_key(owner)[1],
                "1" if force else "0",
                *fields,
            ],
        )
        return bool(kept)

    async def requeue(self, delivery: Delivery) -> None:
        job = delivery.job
        async with reaching(self.reach), self._client.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(job.id), "state", JobState.QUEUED.value)
            pipe.xack(self._stream, GROUP, delivery.ticket)
            pipe.xdel(self._stream, delivery.ticket)
            pipe.xadd(self._stream, {"id": job.id, "bytes": len(job.body)})
            await pipe.execute()

    async def depth(self) -> int:
        """Jobs waiting or running; also reads the epoch (a store that lost its data is made
        again here, within a second of the loss, even with no job coming)."""
        async with reaching(self.reach):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.xlen(self._stream)
                pipe.zcard(self._results_key)
                pipe.get(self._epoch.key)
                waiting, kept, secret = await pipe.execute()
            await self._epoch.check(secret)
            if secret is not None:
                self._epoch.known = int(waiting) + int(kept)
        return int(waiting)
