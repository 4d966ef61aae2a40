"""The epoch of a job store on Redis as this process knows it (`epoch`): the stream, its
consumer group and the epoch are made when missing, the epoch read again finds a Redis that
came back without its data, and the epochs found lost are remembered, so that their jobs
answer as lost rather than unknown."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from inferd.jobs.epoch import Epoch, new_secret
from inferd.jobs.record import Job

log = logging.getLogger("inferd.jobs.redis_store")  # (the store's lines keep its name)


class RedisEpoch:
    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        epoch_key: str,
        prefix: str,
        on_lost: Callable[[int], None],
    ) -> None:
        self._client = client
        self._stream = stream
        self._group = group
        self.key = epoch_key
        self._prefix = prefix
        self._on_lost = on_lost
        self.current: Epoch | None = None
        self._making = asyncio.Lock()
        self._lost_epochs: dict[str, Epoch] = {}
        """Epochs this process saw lost, by tag: their ids answer as lost jobs."""
        self.known = 0
        """Jobs (waiting, running, answers kept) when the store was last read."""

    async def make(self) -> Epoch:
        """The stream, the group and the epoch, made if missing (MKSTREAM; SET NX); a changed
        epoch is a store that lost its data: logged once, its jobs remembered as lost."""
        async with self._making:  # one at a time: a loss found by two calls is one loss
            return await self._make_now()

    async def _make_now(self) -> Epoch:
        try:
            await self._client.xgroup_create(self._stream, self._group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        wrote = bool(await self._client.set(self.key, new_secret(), nx=True))
        secret: Any = await self._client.get(self.key)
        current = Epoch(secret.decode())
        old = self.current
        self.current = current
        if old is None or old == current:
            return current
        self._lost_epochs[old.tag] = old
        log.warning(
            "the job store came back empty (Redis lost its data: a restart without "
            "persistence, a failover to an empty replica, or a flush); its stream and group "
            "are made again and new jobs run. The jobs it held are lost: each answers "
            "failed, 'the job store lost this job'",
            extra={"jobs_known": self.known, "prefix": self._prefix},
        )
        if wrote:  # one process counts a loss: the one that made the new epoch
            self._on_lost(self.known)
        self.known = 0
        return current

    async def check(self, secret: bytes | None) -> None:
        """Makes the store again when the epoch read (`secret`) is not this process's."""
        if self.current is None or secret is None or secret.decode() != self.current.secret:
            await self.make()

    def lost(self, job_id: str, ttl_s: float) -> Job | None:
        """A lost record for an id an epoch this process knows issued, whose answer could not
        have expired yet (`ttl_s` after it finished); else None."""
        epochs = [*self._lost_epochs.values(), *([self.current] if self.current else [])]
        for epoch in epochs:
            made = epoch.issued_at(job_id)
            if made is not None and time.time() - made < ttl_s:
                return Job.lost_record(job_id, made)
        return None
