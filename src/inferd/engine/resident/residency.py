"""Residency: which model versions are in memory, under a budget.

A model's `residency` is `pinned` (loaded at start, kept until an admin unloads it: the default)
or `on_demand`: not loaded at start, loaded by its first request (requests arriving meanwhile
wait for that one load, within their deadlines), and evictable. Each version's footprint is
measured when it loads (the process's resident memory before and after: the runtime's arenas
and the warm-up included; loads are one at a time, so the difference is that version's). When
a load would take the versions in memory over `model_memory_budget_mb` (or their count over
`max_loaded_versions`, or what the versions on a GPU hold of its memory over
`device_memory_budget_mb`: inferd.engine.resident.budget), the least recently used idle `on_demand`
versions are evicted first (for a GPU's memory, only those holding some of it): never one
with a request in flight or queued, nor one of a model in a rollout, nor a pinned one. When
the idle ones do not suffice, nothing is evicted and the load waits for busy ones to go idle,
for as long as a request waits for it (each within its deadline, then 5030 with the reason);
a load that could not fit even with every version that may go gone (on demand, not in a
rollout) is refused 5030 at once, and one that can never fit the budget beside the pinned
versions (inferd.engine.resident.budget.Budget.never_fits) 5071. Nothing serving is touched. An
evicted version's footprint is remembered: its next load is budgeted by it. The request
that starts a load counts it against its client's limit (inferd.engine.resident.load_limits: 4291
over it); one that finds its version resident or loading counts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from inferd.clients import current_client
from inferd.engine.resident.budget import Budget, Need, device_mb, mb
from inferd.engine.resident.heap import SettleLater
from inferd.engine.resident.load_limits import LoadLimits
from inferd.engine.resident.residency_record import Record, ResidencyFacts
from inferd.engine.versions.version import Version, VersionState
from inferd.errors import (
    DeadlineExceededError,
    ModelTooLargeError,
    NotFoundError,
    UnavailableError,
)
from inferd.observability.trace import current_trace

log = logging.getLogger(__name__)

NOT_RESIDENT = "on demand: loads on its first request"
"""The reason an `on_demand` version that is not in memory shows (index, readiness)."""
ROOM_RECHECK_S = 0.25
"""A load waiting for a busy version to go idle looks again at least this often (a version
going idle wakes it at once; this catches a rollout's end and its last waiter's deadline)."""


Load = Callable[[Version], Awaitable[None]]
"""Loads a registered version in place (its footprint measured: `Version.footprint_bytes`)."""
Evict = Callable[[Version], Awaitable[None]]
"""Drains and closes a version, leaving it registered and not resident."""


class Residency:
    def __init__(
        self,
        budget_mb: float,
        max_versions: int,
        load: Load,
        evict: Evict,
        versions: Callable[[], list[Version]],
        in_rollout: Callable[[str], bool],
        pinned_anyway: Callable[[Version], bool] = lambda version: False,
        disk_bytes: Callable[[Version], int] = lambda version: 0,
        device_budget_mb: float = 0,
        load_limits: LoadLimits | None = None,
    ) -> None:
        """`budget_mb`, `max_versions`, `device_budget_mb` (per GPU): 0 for none; `versions`:
        every registered version; `pinned_anyway`: an `on_demand` version kept like a pinned
        one (a zero-shot model's base, which the zero-shot model holds); `disk_bytes`: the size
        of a version's files, from which a version never loaded is budgeted
        (inferd.engine.resident.budget.UNMEASURED_FACTOR times it); `load_limits`: the on-demand
        loads each client may cause (None: no limit)."""
        self._budget = Budget(budget_mb, max_versions, device_budget_mb, disk_bytes)
        self._load = load
        self._evict = evict
        self._versions = versions
        self._in_rollout = in_rollout
        self._pinned_anyway = pinned_anyway
        self._records: dict[tuple[str, int], Record] = {}
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
        return version.config.residency == "on_demand" and not self._pinned_anyway(version)

    def never_fits(self, version: Version) -> str | None:
        """Why an on-demand `version` not in memory can never load under the budgets (5071,
        and a reason of `/ready`), None when it may."""
        if version.ready or not self.on_demand(version):
            return None
        return self._budget.never_fits(_named(version), version, self._kept(version))

    def _kept(self, coming: Version) -> int:
        """The bytes held by the versions in memory never evicted (pinned ones)."""
        stay = [v for v in self._versions() if v.ready and v is not coming and not self._may_go(v)]
        return sum(v.footprint_bytes or 0 for v in stay)

    def _record(self, version: Version) -> Record:
        key = (version.model, version.version)
        record = self._records.get(key)
        if record is None or record.version is not version:
            kept = record
            record = Record(version)
            if kept is not None:  # (the same version registered again: its counts go on)
                record.loads, record.evictions = kept.loads, kept.evictions
                record.cold_waits, record.cold_wait_s = kept.cold_waits, kept.cold_wait_s
            self._records[key] = record
        return record

    @asynccontextmanager
    async def hold(self, version: Version, deadline: float | None) -> AsyncIterator[Version]:
        """`version` in memory for the time of a request: loaded first when it is an
        `on_demand` version not resident (waiting at most until `deadline`, a loop time),
        and never evicted while held."""
        record = self._record(version)
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
        record = self._record(version)
        record.in_use += 1
        record.last_used = time.monotonic()

    def leave(self, version: Version) -> None:
        self._release(self._record(version))

    def _release(self, record: Record) -> None:
        record.in_use = max(record.in_use - 1, 0)
        record.last_used = time.monotonic()
        if record.in_use == 0 and self._wakes and self._may_go(record.version):
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
                self._load_limits.take(current_client(), _named(version))
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
                f"{_named(version)} is loading on demand and "
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

    async def loaded_by_admin(self, version: Version) -> None:
        """An admin's load brought `version` into memory: the idle on-demand versions go,
        least recently used first, until it fits the budget (over it, with a warning, until
        one goes idle)."""
        record = self._record(version)
        record.last_used = time.monotonic()
        if self.on_demand(version):
            record.loads += 1
        async with self._lock:
            await self._make_room(version, self._budget.need(version), loaded=True)

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
            self._still_wanted(version)
            need = self._budget.need(version, self._kept(version))
            if not await self._make_room(version, need):
                return False
            self._room.pop((version.model, version.version), None)
            record = self._record(version)
            version.state, version.reason = VersionState.LOADING, None
            await self._load(version)
            if not version.ready:
                reason = version.reason or "it did not load"
                version.state, version.reason = (
                    VersionState.UNLOADED,
                    f"its last load failed: {reason}",
                )
                raise UnavailableError(
                    f"{_named(version)} did not load: {reason}",
                    retry_after_s=1.0,
                )
            record.loads += 1
            record.last_used = time.monotonic()
            self._settling.ask()
            log.info(
                "model version loaded on demand",
                extra=_footprint(version, model=version.model, version=version.version),
            )
            # measured now: over the budget (its estimate was short), the next idle ones go
            await self._make_room(version, self._budget.need(version), loaded=True)
            return True

    def _still_wanted(self, version: Version) -> None:
        """Refuses a load that waited while the server began shutting down, or while an
        admin unloaded its model or loaded it anew (another `Version` now serves)."""
        name = _named(version)
        if self._aborted:
            raise UnavailableError(f"{name}: the server is shutting down", retry_after_s=1.0)
        registered = [
            v for v in self._versions() if (v.model, v.version) == (version.model, version.version)
        ]
        if not any(v is version for v in registered):
            if registered:
                raise UnavailableError(
                    f"{name} was loaded by an admin while this load waited; retry",
                    retry_after_s=1.0,
                )
            raise NotFoundError(f"{name} was unloaded while its load waited")

    async def _make_room(self, coming: Version, need: Need, loaded: bool = False) -> bool:
        """Evicts least recently used idle `on_demand` versions until `coming`, needing
        `need`, fits beside the others: True. Refused (5030) when it could not fit even with
        every version that may go gone, or when no request waits for it any more. False while
        it needs busy versions to go (nothing is evicted until what is idle suffices), its
        reason kept for the requests whose deadlines end first. `loaded`: it serves already,
        and the idle ones go until it fits, the budget exceeded until then."""
        key = (coming.model, coming.version)
        name = _named(coming)
        never = None if loaded else self._budget.never_fits(name, coming, self._kept(coming))
        if never is not None:
            raise ModelTooLargeError(never)
        while True:
            resident = [v for v in self._versions() if v.ready and v is not coming]
            short = self._budget.shortfall(resident, need)
            if short is None:
                return True
            idle = [v for v in resident if self._evictable(v) and short.frees(v, self._budget.need)]
            if not loaded:
                stays = [v for v in resident if not self._may_go(v)]
                if not self._waiters.get(key) or self._budget.shortfall(stays, need):
                    # nothing goes for a load no one awaits, nor for one that could never fit
                    raise UnavailableError(self._budget.no_room(name, short), retry_after_s=1.0)
                busy = [v for v in resident if not self._evictable(v)]
                if not idle or self._budget.shortfall(busy, need):
                    self._room[key] = self._budget.no_room(name, short)
                    return False  # the idle ones do not suffice: the busy ones must go idle
            elif not idle:
                log.warning(
                    "versions in memory over the budget, none idle to evict",
                    extra=short.figures(),
                )
                return True
            await self._evict_one(min(idle, key=lambda v: self._record(v).last_used), coming)

    async def _evict_one(self, victim: Version, coming: Version) -> None:
        """Takes `victim` out of traffic at once and out of memory."""
        # out of traffic at once: a request arriving while it closes waits for its reload
        victim.state, victim.reason = VersionState.UNLOADED, NOT_RESIDENT
        self._record(victim).evictions += 1
        log.info(
            "model version evicted",
            extra=_footprint(
                victim,
                model=victim.model,
                version=victim.version,
                **{"for": f"{coming.model}/{coming.version}"},
            ),
        )
        await self._evict(victim)
        self._settling.ask()

    def close(self) -> None:
        self._settling.cancel()

    def _may_go(self, version: Version) -> bool:
        """Whether `version` is evicted once idle."""
        return self.on_demand(version) and not self._in_rollout(version.model)

    def _evictable(self, version: Version) -> bool:
        record = self._records.get((version.model, version.version))
        return (
            self._may_go(version)
            and (record is None or record.in_use == 0)
            and version.queued_items == 0
        )

    def facts(self) -> list[ResidencyFacts]:
        return [
            ResidencyFacts.of(v, self.on_demand(v), self._records.get((v.model, v.version)))
            for v in self._versions()
        ]


def _named(version: Version) -> str:
    """A version as error messages name it."""
    return f"model '{version.model}' version {version.version}"


def _footprint(holder: Version, /, **extra: object) -> dict[str, object]:
    """A log line's fields with what `holder` holds: host MB, and MB per GPU when on one."""
    extra["footprint_mb"] = mb(holder.footprint_bytes)
    if holder.device_footprint:
        extra["device_mb"] = device_mb(holder.device_footprint)
    return extra
