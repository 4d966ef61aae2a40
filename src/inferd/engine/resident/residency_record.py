"""What residency counts of each version: its record (last use, requests in it, loads,
evictions, cold waits), kept across its registrations, the facts the metrics and the status
page show, and how its messages and log lines name a version and what it holds."""

from __future__ import annotations

from dataclasses import dataclass

from inferd.engine.resident.budget import device_mb, mb
from inferd.engine.versions.version import Version, VersionState


@dataclass
class Record:
    version: Version
    last_used: float = 0.0
    in_use: int = 0
    loads: int = 0
    evictions: int = 0
    cold_waits: int = 0
    cold_wait_s: float = 0.0


@dataclass(frozen=True)
class ResidencyFacts:
    """One version's residency, as the metrics and the status page show it."""

    model: str
    version: str
    on_demand: bool
    resident: bool
    footprint_bytes: int | None
    device_footprint: dict[int, int] | None
    loads: int
    evictions: int
    cold_waits: int
    cold_wait_s: float
    loading: bool = False
    """Being loaded now (requests for it wait)."""

    @classmethod
    def of(cls, version: Version, on_demand: bool, record: Record | None) -> ResidencyFacts:
        """`version`'s facts (`record`: what residency counted of it; None: nothing yet)."""
        record = record or Record(version)
        return cls(
            version.model,
            str(version.version),
            on_demand,
            version.ready,
            version.footprint_bytes,
            version.device_footprint,
            record.loads,
            record.evictions,
            record.cold_waits,
            record.cold_wait_s,
            version.state is VersionState.LOADING,
        )


class Records:
    """Each version's record, by model and version number."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], Record] = {}

    def of(self, version: Version) -> Record:
        """`version`'s record, made on first use; a version registered again (a new `Version`
        of the same number) goes on with the counts of the one it replaced."""
        key = (version.model, version.version)
        record = self._by_key.get(key)
        if record is None or record.version is not version:
            kept = record
            record = Record(version)
            if kept is not None:
                record.loads, record.evictions = kept.loads, kept.evictions
                record.cold_waits, record.cold_wait_s = kept.cold_waits, kept.cold_wait_s
            self._by_key[key] = record
        return record

    def find(self, version: Version) -> Record | None:
        """The record of `version`'s model and number, if one was made."""
        return self._by_key.get((version.model, version.version))


def named(version: Version) -> str:
    """A version as error messages name it."""
    return f"model '{version.model}' version {version.version}"


def footprint(holder: Version, /, **extra: object) -> dict[str, object]:
    """A log line's fields with `holder` and what it holds: host MB, and MB per GPU when on
    one."""
    extra = {"model": holder.model, "version": holder.version, **extra}
    extra["footprint_mb"] = mb(holder.footprint_bytes)
    if holder.device_footprint:
        extra["device_mb"] = device_mb(holder.device_footprint)
    return extra
