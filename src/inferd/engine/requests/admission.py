"""Admission: whether a request may start (not shutting down, memory under its limit, fewer
than `max_in_flight` in flight), its deadline, and the count a drain waits on.

Every admitted request holds one in-flight slot from admission to its answer (a generation:
until its stream ends or its client leaves).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from inferd.config.model import ModelConfig
from inferd.config.server_settings import ServerSettings
from inferd.drain import ended_within
from inferd.engine.requests.memory_admission import MemoryGate
from inferd.errors import InferdError, QueueFullError, UnavailableError

log = logging.getLogger(__name__)


class Admission:
    def __init__(self, settings: ServerSettings) -> None:
        self._settings = settings
        self._memory = MemoryGate(settings.max_memory_mb, settings.max_gpu_memory_fraction)
        self._in_flight = 0
        self.aborting = False
        """Set when what is in flight is answered 5030 at once (a drain out of time, a forced
        exit)."""
        self.cut = 0
        """Requests in flight answered 5030 since the abort began (not those that finished
        meanwhile)."""
        self._none_in_flight = asyncio.Event()
        self._none_in_flight.set()
        self.accepting = True
        self.draining = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def refusal(self) -> InferdError | None:
        """What a request would be refused with now, if anything: 5030 while shutting down or
        over memory, 4290 at the in-flight limit."""
        if not self.accepting:
            return UnavailableError("the server is shutting down", retry_after_s=1.0)
        over_memory = self._memory.refusal()
        if over_memory is not None:
            return over_memory
        if self._in_flight >= self._settings.max_in_flight:
            return QueueFullError(
                f"the server holds {self._in_flight} requests in flight, its limit",
                retry_after_s=1.0,
            )
        return None

    def enter(self) -> None:
        """Takes a slot, or raises `refusal()`."""
        refused = self.refusal()
        if refused is not None:
            raise refused
        self._in_flight += 1
        self._none_in_flight.clear()

    def leave(self, unavailable: bool = False) -> None:
        """A request's answer is out; `unavailable`: it was a 5030 (counted once an abort
        began: `cut`)."""
        self._in_flight -= 1
        if self._in_flight == 0:
            self._none_in_flight.set()
        if unavailable and self.aborting:
            self.cut += 1

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """A slot held from admission to answer."""
        self.enter()
        unavailable = False
        try:
            yield
        except UnavailableError:
            unavailable = True
            raise
        finally:
            self.leave(unavailable)

    def deadline_for(self, config: ModelConfig, timeout_s: float | None) -> float:
        """The loop time by which the answer is due: the client's timeout (capped by
        `max_request_timeout_s`), else the model's, else the server's."""
        if timeout_s is not None:
            chosen = min(timeout_s, self._settings.max_request_timeout_s)
        else:
            chosen = config.request_timeout_s or self._settings.request_timeout_s
        return asyncio.get_running_loop().time() + chosen

    def begin_drain(self) -> None:
        """Readiness turns false; requests are still accepted (the grace period)."""
        self.draining = True

    async def drain(self, timeout_s: float) -> bool:
        """Refuses new requests and waits for admitted ones. True when all finished in time."""
        self.draining = True
        self.accepting = False
        if await ended_within(self._none_in_flight, timeout_s):
            return True
        log.warning("drain timed out", extra={"in_flight": self._in_flight})
        return False
