"""Residency: which model versions are in memory, under a budget (docs/operations.md tells it
as an operator sees it).

A model's `residency` is `pinned` (loaded at start, kept until an admin unloads it: the
default) or `on_demand`: loaded by its first request (requests arriving meanwhile wait for that
one load, within their deadlines), and evictable. A version's footprint is measured when it
loads (resident memory before and after; loads are one at a time). When a load would take the
versions in memory over a budget (inferd.engine.resident.budget: host MB, count, each GPU's
MB), the least recently used idle `on_demand` versions go first: never one with a request in
flight or queued, of a model in a rollout, or pinned. When the idle ones do not suffice, the
load waits for busy ones to go idle, each request within its deadline (then 5030 with the
reason); a load that could not fit with every version that may go gone is refused 5030 at
once, one that never fits beside the pinned versions 5071. An evicted version's next load is
budgeted by its measured footprint. The request that starts a load counts it against its
client's limit (inferd.engine.resident.load_limits: 4291 over it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from inferd.clients import current_client
from inferd.engine.resident.budget import Budget, Need
from inferd.engine.resident.eviction import Eviction
from inferd.engine.resident.heap import SettleLater
from inferd.engine.resident.load_limits import LoadLimits
from inferd.engine.resident.residency_record import (
    Record,
    Records,
    ResidencyFacts,
    footprint,
    named,
)
from inferd.engine.versions.version import Version, VersionState
from inferd.errors import (
    DeadlineExceededError,
    ModelTooLargeError,
    UnavailableError,
)
from inferd.observability.trace import current_trace

if TYPE_CHECKING:
    from inferd.engine.resident.holdings import Holdings

log = logging.getLogger(__name__)

ROOM_RECHECK_S = 0.25
"""A load waiting for a busy version to go idle looks again at least this often (a version
going idle wakes it at once; this catches a rollout's end and its last waiter's deadline)."""


class Residency:
    def __init__(
        self,
        budget_mb: float,
        max_versions: int,
        holdings: Holdings,
        device_budget_mb: float = 0,
        load_limits: LoadLimits | None = None,
    ) -> None:
        """`budget_mb`, `max_versions`, `device_budget_mb` (per GPU): 0 for none;
        `load_limits`: the on-demand loads each client may cause (None: no limit)."""
        self._budget = Budget(budget_mb, max_versions, device_budget_mb, holdings.disk_bytes)
        self._holdings = holdings
        self._records = Records()
        self._eviction = Eviction(holdings, self._records)
        self._loading: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()
        """One on-demand load at a time: the budget's arithmetic and the footprint measured."""
        self._waiters: dict[tuple[str, int], int] = {}
        """Requests waiting for each version's load."""
        self._room: dict[tuple[str, int], str] = {}
        """The loads waiting for a busy version to go idle, with why they cannot fit now."""
        self._wakes: set[asyncio.Event] = set()
        """One for each load waiting for room: set when an on-demand version goes idle."""
        self._aborted = False
        self._settling = SettleLater()
        """The heap settled after loads and evictions (inferd.engine.resident.heap)."""
        self._load_limits = load_limits

    def on_demand(self, version: Version) -> bool:
        return self._eviction.on_demand(version)

    def never_fits(self, version: Version) -> str | None:
        """Why an on-demand `version` not in memory can never load under the budgets (5071,
        and a reason of `/ready`), None when it may."""
        if version.ready or not self.on_demand(version):
            return None
        return self._budget.never_fits(named(version), version, self._eviction.kept_bytes(version))

    @asynccontextmanager
    async def hold(self, version: Version, deadline: float | None) -> AsyncIterator[Version]:
        """`version` in memory for the time of a request: loaded first when it is an
        `on_demand` version not resident (waiting at most until `deadline`, a loop time),
        and never evicted while held."""
        record = self._records.of(version)
        record.in_use += 1
        try:
            if not version.ready and self.on_demand(version):
                await self._wait_for_load(version, record, deadline)
            record.last_used = time.monotonic()
            yield version
        finally:
            self._release(record)

    def enter(self, version: Version) -> None:
        """Holds `version` until `leave` (a generation's stream, which outlives its call)."""
        record = self._records.of(version)
        record.in_use += 1
        record.last_used = time.monotonic()

    def leave(self, version: Version) -> None:
        self._release(self._records.of(version))

    def _release(self, record: Record) -> None:
        record.in_use = max(record.in_use - 1, 0)
        record.last_used = time.monotonic()
        if record.in_use == 0 and self._wakes and self._eviction.may_go(record.version):
            for wake in self._wakes:
                wake.set()

    def abort(self) -> None:
        """A forced shutdown: the loads waiting for room are refused (5030) at once, and
        none starts."""
        self._aborted = True
        for wake in self._wakes:
            wake.set()

    async def _wait_for_load(
        self, version: Version, record: Record, deadline: float | None
    ) -> None:
        key = (version.model, version.version)
        task = self._loading.get(key)
        if task is None:
            never = self.never_fits(version)
            if never is not None:  # said at once, costing the client none of its loads
                raise ModelTooLargeError(never)
            if self._load_limits is not None:  # (a load already under way costs no one)
                self._load_limits.take(current_client(), named(version))
            task = asyncio.get_running_loop().create_task(
                self._load_one(version), name=f"inferd-load-{version.model}-{version.version}"
            )
            self._loading[key] = task
            task.add_done_callback(lambda done: self._load_ended(key, done))
        started = time.perf_counter()
        timeout = None if deadline is None else deadline - asyncio.get_running_loop().time()
        self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            no_room = self._room.get(key)
            if no_room is not None:  # still waiting for a busy version to go idle
                raise UnavailableError(no_room, retry_after_s=1.0) from None
            raise DeadlineExceededError(
                f"{named(version)} is loading on demand and "
                "its load outlasted the request's deadline"
            ) from None
        finally:
            self._waiters[key] -= 1
            if not self._waiters[key]:
                del self._waiters[key]
            ended = time.perf_counter()
            record.cold_waits += 1
            record.cold_wait_s += ended - started
            current_trace().mark("load", started, ended)  # (its load_s too)

    async def loaded_by_admin(self, version: Version) -> list[Version]:
        """An admin's load brought `version` into memory: the idle on-demand versions go,
        least recently used first, until it fits the budget (over it, with a warning, until
        one goes idle). Returns those it evicted."""
        record = self._records.of(version)
        record.last_used = time.monotonic()
        if self.on_demand(version):
            record.loads += 1
        evicted: list[Version] = []
        async with self._lock:
            await self._make_room(version, self._budget.need(version), True, evicted)
        return evicted

    def _load_ended(self, key: tuple[str, int], done: asyncio.Task[None]) -> None:
        self._loading.pop(key, None)
        if not done.cancelled():
            done.exception()  # (its waiters have it; one that outlived them all is dropped)

    async def _load_one(self, version: Version) -> None:
        key = (version.model, version.version)
        wake = asyncio.Event()
        try:
            # never loaded: from its files (then measured, and made room for); while only
            # busy versions could make room, waits for one to go idle, outside the lock (so
            # that a load that fits elsewhere, another GPU's, is not held up by it)
            while not await self._load_if_room(version):
                wake.clear()
                self._wakes.add(wake)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), ROOM_RECHECK_S)
        finally:
            self._wakes.discard(wake)
            self._room.pop(key, None)

    async def _load_if_room(self, version: Version) -> bool:
        """Loads `version` once room is made for it: False when it must wait for room."""
        async with self._lock:
            if version.ready:
                return True
            self._eviction.still_wanted(version, self._aborted)
            need = self._budget.need(version, self._eviction.kept_bytes(version))
            if not await self._make_room(version, need):
                return False
            self._room.pop((version.model, version.version), None)
            record = self._records.of(version)
            version.state, version.reason = VersionState.LOADING, None
            await self._holdings.load_resident(version)
            if not version.ready:
                reason = version.reason or "it did not load"
                version.state, version.reason = (
                    VersionState.UNLOADED,
                    f"its last load failed: {reason}",
                )
                raise UnavailableError(
                    f"{named(version)} did not load: {reason}",
                    retry_after_s=1.0,
                )
            record.loads += 1
            record.last_used = time.monotonic()
            self._settling.ask()
            log.info(
                "model version loaded on demand",
                extra=footprint(version),
            )
            # measured now: over the budget (its estimate was short), the next idle ones go
            await self._make_room(version, self._budget.need(version), loaded=True)
            return True

    async def _make_room(
        self,
        coming: Version,
        need: Need,
        loaded: bool = False,
        evicted: list[Version] | None = None,
    ) -> bool:
        """Evicts least recently used idle `on_demand` versions until `coming`, needing
        `need`, fits beside the others: True. Refused (5030) when it could not fit even with
        every version that may go gone, or when no request waits for it any more. False while
        it needs busy versions to go (nothing is evicted until what is idle suffices), its
        reason kept for the requests whose deadlines end first. `loaded`: it serves already,
        and the idle ones go until it fits, the budget exceeded until then. Each version it
        evicts is added to `evicted`."""
        key = (coming.model, coming.version)
        name = named(coming)
        never = (
            None
            if loaded
            else self._budget.never_fits(name, coming, self._eviction.kept_bytes(coming))
        )
        if never is not None:
            raise ModelTooLargeError(never)
        while True:
            resident = [v for v in self._holdings.versions() if v.ready and v is not coming]
            short = self._budget.shortfall(resident, need)
            if short is None:
                return True
            idle = [
                v
                for v in resident
                if self._eviction.evictable(v) and short.frees(v, self._budget.need)
            ]
            if not loaded:
                stays = [v for v in resident if not self._eviction.may_go(v)]
                if not self._waiters.get(key) or self._budget.shortfall(stays, need):
                    # nothing goes for a load no one awaits, nor for one that could never fit
                    raise UnavailableError(self._budget.no_room(name, short), retry_after_s=1.0)
                busy = [v for v in resident if not self._eviction.evictable(v)]
                if not idle or self._budget.shortfall(busy, need):
                    self._room[key] = self._budget.no_room(name, short)
                    return False  # the idle ones do not suffice: the busy ones must go idle
            elif not idle:
                log.warning(
                    "versions in memory over the budget, none idle to evict",
                    extra=short.figures(),
                )
                return True
            victim = self._eviction.least_recent(idle)
            await self._eviction.evict(victim, coming)
            self._settling.ask()
            if evicted is not None:
                evicted.append(victim)

    def close(self) -> None:
        self._settling.cancel()

    def facts(self) -> list[ResidencyFacts]:
        return [
            ResidencyFacts.of(v, self.on_demand(v), self._records.find(v))
            for v in self._holdings.versions()
        ]
