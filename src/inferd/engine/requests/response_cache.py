"""A response cache: least recently used entries within a byte budget, each for at most a
time to live, and single flight: a request identical to one still running waits for that
one's answer instead of running again.

One cache belongs to one model version (the engine looks each request to the version up in it:
`inferd.engine.requests.cached`), so the version is part of every key by construction, and a version
that is retired or reloaded takes its entries with it. Runs on the event loop only: no locks.

A failure is never shared: when the request that runs fails (its own deadline, its client
gone, a bad batch), the ones waiting for it run themselves, one of them first.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from inferd.errors import DeadlineExceededError

V = TypeVar("V")

HIT = "hit"
MISS = "miss"
COALESCED = "coalesced"
"""How a lookup was answered: from the cache, by running, or by an identical request that was
already running."""


@dataclass
class _Entry(Generic[V]):
    value: V
    size: int
    expires: float


class _Failed:
    """What a flight ends with when its request failed: the waiters run themselves."""


_FAILED = _Failed()


class ResponseCache(Generic[V]):
    def __init__(
        self,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[bytes, _Entry[V]] = OrderedDict()
        self._flights: dict[bytes, asyncio.Future[V | _Failed]] = {}
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.coalesced = 0
        self.evictions = 0
        """Entries dropped for room (not those that expired)."""
        self.expirations = 0

    @property
    def entries(self) -> int:
        return len(self._entries)

    async def get_or_run(
        self,
        key: bytes,
        run: Callable[[], Awaitable[V]],
        size_of: Callable[[V], int],
        deadline: float | None,
    ) -> tuple[V, str]:
        """The cached answer for `key`, else the answer of the identical request running,
        else `run()`'s, kept for the next. `deadline` (loop time) bounds the wait for another
        request's answer: past it, 5040, as a request of one's own would."""
        while True:
            entry = self._lookup(key)
            if entry is not None:
                self.hits += 1
                return entry.value, HIT
            flight = self._flights.get(key)
            if flight is None:
                break
            outcome = await self._wait(flight, deadline)
            if not isinstance(outcome, _Failed):
                self.coalesced += 1
                return outcome, COALESCED
            # the request that ran failed: look again (another waiter may have run it)
        self.misses += 1
        flight = asyncio.get_running_loop().create_future()
        self._flights[key] = flight
        try:
            value = await run()
        except BaseException:
            flight.set_result(_FAILED)
            raise
        finally:
            del self._flights[key]
        self._store(key, value, size_of(value))
        flight.set_result(value)
        return value, MISS

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    # -- internals ---------------------------------------------------------------------------

    @staticmethod
    async def _wait(flight: asyncio.Future[V | _Failed], deadline: float | None) -> V | _Failed:
        if deadline is None:
            return await asyncio.shield(flight)
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(asyncio.shield(flight), max(remaining, 0.0))
        except TimeoutError:
            raise DeadlineExceededError(
                "the request's deadline passed while an identical request ran"
            ) from None

    def _lookup(self, key: bytes) -> _Entry[V] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            self._drop(key)
            self.expirations += 1
            return None
        self._entries.move_to_end(key)
        return entry

    def _store(self, key: bytes, value: V, size: int) -> None:
        if size > self.max_bytes:
            return  # larger than the whole budget: it would only push everything else out
        if key in self._entries:
            self._drop(key)
        now = self._clock()
        self._entries[key] = _Entry(value, size, now + self.ttl_s)
        self.bytes += size
        # from the least recently used end: what expired, then what exceeds the budget
        while self._entries:
            oldest_key, oldest = next(iter(self._entries.items()))
            if oldest.expires <= now:
                self._drop(oldest_key)
                self.expirations += 1
            elif self.bytes > self.max_bytes:
                self._drop(oldest_key)
                self.evictions += 1
            else:
                break

    def _drop(self, key: bytes) -> None:
        entry = self._entries.pop(key)
        self.bytes -= entry.size
