"""Which versions residency may take out of memory, and whether a load that waited is still
wanted: the rules of inferd.engine.resident.residency, apart from its waiting and loading.

A version may go when it is `on_demand` (not pinned by its config, nor kept anyway by its
holdings) and its model is not in a rollout; it is evictable when it may go and nothing holds
it (no request in it, none queued for it). The versions that never go are what a coming load
must fit beside."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from inferd.engine.resident.residency_record import Records, footprint, named
from inferd.engine.versions.version import Version, VersionState
from inferd.errors import NotFoundError, UnavailableError

if TYPE_CHECKING:
    from inferd.engine.resident.holdings import Holdings


NOT_RESIDENT = "on demand: loads on its first request"
"""The reason an `on_demand` version that is not in memory shows (index, readiness)."""

log = logging.getLogger("inferd.engine.resident.residency")  # (its lines keep that name)


class Eviction:
    def __init__(self, holdings: Holdings, records: Records) -> None:
        self._holdings = holdings
        self._records = records

    def on_demand(self, version: Version) -> bool:
        return version.config.residency == "on_demand" and not self._holdings.pinned_anyway(version)

    def may_go(self, version: Version) -> bool:
        """Whether `version` is evicted once idle."""
        return self.on_demand(version) and not self._holdings.in_rollout(version.model)

    def evictable(self, version: Version) -> bool:
        record = self._records.find(version)
        return (
            self.may_go(version)
            and (record is None or record.in_use == 0)
            and version.queued_items == 0
        )

    def kept_bytes(self, coming: Version) -> int:
        """The bytes held by the versions in memory never evicted (pinned ones)."""
        stay = [
            v
            for v in self._holdings.versions()
            if v.ready and v is not coming and not self.may_go(v)
        ]
        return sum(v.footprint_bytes or 0 for v in stay)

    async def evict(self, victim: Version, coming: Version) -> None:
        """Takes `victim` out of traffic at once and out of memory, for `coming`."""
        # out of traffic at once: a request arriving while it closes waits for its reload
        victim.state, victim.reason = VersionState.UNLOADED, NOT_RESIDENT
        self._records.of(victim).evictions += 1
        log.info(
            "model version evicted",
            extra=footprint(victim, **{"for": f"{coming.model}/{coming.version}"}),
        )
        await self._holdings.evict(victim)

    def least_recent(self, idle: list[Version]) -> Version:
        return min(idle, key=lambda v: self._records.of(v).last_used)

    def still_wanted(self, version: Version, aborted: bool) -> None:
        """Refuses a load that waited while the server began shutting down (`aborted`), or
        while an admin unloaded its model or loaded it anew (another `Version` now serves)."""
        name = named(version)
        if aborted:
            raise UnavailableError(f"{name}: the server is shutting down", retry_after_s=1.0)
        registered = [
            v
            for v in self._holdings.versions()
            if (v.model, v.version) == (version.model, version.version)
        ]
        if not any(v is version for v in registered):
            if registered:
                raise UnavailableError(
                    f"{name} was loaded by an admin while this load waited; retry",
                    retry_after_s=1.0,
                )
            raise NotFoundError(f"{name} was unloaded while its load waited")
