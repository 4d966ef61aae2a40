"""What residency counts of each version: its record (last use, requests in it, loads,
evictions, cold waits), and the facts the metrics and the status page show."""

from __future__ import annotations

from dataclasses import dataclass

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
