"""Jobs on Redis Streams, shared by every inferd process pointed at the same Redis.

Keys, all under one hash tag so that a Redis Cluster keeps them in one slot:
`{prefix}:stream`, the queue (one entry per job waiting or running, holding its id and the
size of its body), read by the consumer group `inferd`; `{prefix}:bytes`, the bodies' total
(the queue's second bound); and `{prefix}:job:<id>`, a hash with the job's record, which
expires `result_ttl_s` after the job finished.

Nothing is lost: an entry is acknowledged and deleted only with the job's answer written (one
transaction). A worker that stops mid-job (killed, its machine gone) leaves its entry pending;
after `claim_after_s` without news from it, the next worker to look claims the entry
(XAUTOCLAIM) and runs the job again. A worker running a job tells the stream so every third of
that time (`keep`: XCLAIM to itself, which resets the entry's idle time), so a long job is
never taken from a live worker. The queue's bounds are checked and the job added in one script:
two processes cannot both take the last place.
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from inferd.jobs.record import Job, JobState
from inferd.jobs.store import Delivery, QueueBound

GROUP = "inferd"

_SUBMIT = """
local jobs = redis.call('XLEN', KEYS[1])
local held = tonumber(redis.call('GET', KEYS[3]) or '0')
if jobs >= tonumber(ARGV[1]) or held + tonumber(ARGV[3]) > tonumber(ARGV[2]) then
  return {0, jobs, held}
end
redis.call('HSET', KEYS[2], unpack(ARGV, 5))
redis.call('XADD', KEYS[1], '*', 'id', ARGV[4], 'bytes', ARGV[3])
redis.call('INCRBY', KEYS[3], ARGV[3])
return {1, jobs, held}
"""


class RedisJobStore:
    kind = "redis"

    def __init__(
        self,
        url: str,
        prefix: str,
        bound: QueueBound,
        result_ttl_s: float,
        claim_after_s: float,
    ) -> None:
        self._client: aioredis.Redis = aioredis.from_url(url)
        self._stream = f"{{{prefix}}}:stream"
        self._bytes = f"{{{prefix}}}:bytes"
        self._prefix = prefix
        self._bound = bound
        self._ttl_ms = int(result_ttl_s * 1000)
        self._claim_ms = int(claim_after_s * 1000)
        self._submit = self._client.register_script(_SUBMIT)

    def _key(self, job_id: str) -> str:
        return f"{{{self._prefix}}}:job:{job_id}"

    async def open(self) -> None:
        """Reaches Redis (failing start-up when it cannot) and makes the group if needed."""
        try:
            await self._client.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def close(self) -> None:
        await self._client.aclose()

    async def submit(self, job: Job) -> None:
        fields: list[Any] = []
        for name, value in job.to_fields().items():
            fields += [name, value]
        bound, size = self._bound, len(job.body)
        added, jobs, held = await self._submit(
            keys=[self._stream, self._key(job.id), self._bytes],
            args=[bound.jobs, bound.body_bytes, size, job.id, *fields],
        )
        if not added:
            raise bound.refusal(int(jobs), int(held), size) or RuntimeError("refused in Redis")

    async def get(self, job_id: str) -> Job | None:
        fields: Any = await self._client.hgetall(self._key(job_id))
        return Job.from_fields(fields) if fields else None

    async def take(self, worker: str, wait_s: float) -> Delivery | None:
        entry = await self._claim_stale(worker)
        if entry is None:
            read: Any = await self._client.xreadgroup(
                GROUP, worker, {self._stream: ">"}, count=1, block=max(1, int(wait_s * 1000))
            )
            if not read:
                return None
            entry = read[0][1][0]
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
        if "route" not in {k.decode() for k in record}:  # its record is gone: nothing to run
            await self._client.delete(key)
            await self._drop(ticket, int(fields.get(b"bytes", b"0")))
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
        await self._client.xclaim(
            self._stream,
            GROUP,
            delivery.job.worker or "",
            min_idle_time=0,
            message_ids=[delivery.ticket],
            justid=True,
        )

    async def finish(self, delivery: Delivery, job: Job) -> None:
        key = self._key(job.id)
        async with self._client.pipeline(transaction=True) as pipe:
            fields: dict[Any, Any] = job.to_fields()
            pipe.hset(key, mapping=fields)
            pipe.pexpire(key, self._ttl_ms)
            pipe.xack(self._stream, GROUP, delivery.ticket)
            pipe.xdel(self._stream, delivery.ticket)
            pipe.decrby(self._bytes, len(delivery.job.body))
            await pipe.execute()

    async def requeue(self, delivery: Delivery) -> None:
        job = delivery.job
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(job.id), "state", JobState.QUEUED.value)
            pipe.xack(self._stream, GROUP, delivery.ticket)
            pipe.xdel(self._stream, delivery.ticket)
            pipe.xadd(self._stream, {"id": job.id, "bytes": len(job.body)})
            await pipe.execute()

    async def _drop(self, ticket: str, size: int) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xack(self._stream, GROUP, ticket)
            pipe.xdel(self._stream, ticket)
            pipe.decrby(self._bytes, size)
            await pipe.execute()

    async def depth(self) -> int:
        return int(await self._client.xlen(self._stream))
