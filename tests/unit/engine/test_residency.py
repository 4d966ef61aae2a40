"""Residency on fake loads: which version is evicted, what is never evicted, when a load is
refused, and that requests arriving for a cold version share one load."""

from __future__ import annotations

import asyncio

import pytest

from inferd.config.model import ModelConfig
from inferd.engine.residency import NOT_RESIDENT, Residency
from inferd.engine.version import Version, VersionState
from inferd.errors import DeadlineExceededError, UnavailableError

MB = 2**20


class Box:
    """Versions and the loads and evictions done to them."""

    def __init__(self, names: list[str], residency: str = "on_demand", mb: int = 10) -> None:
        config = ModelConfig(residency=residency)  # type: ignore[arg-type]
        self.versions = {name: Version(name, 1, config) for name in names}
        for version in self.versions.values():
            version.state, version.reason = VersionState.UNLOADED, NOT_RESIDENT
        self.mb = mb
        self.loads: list[str] = []
        self.evictions: list[str] = []
        self.load_s = 0.0
        self.rollout: set[str] = set()

    async def load(self, version: Version) -> None:
        self.loads.append(version.model)
        await asyncio.sleep(self.load_s)
        version.state, version.reason = VersionState.READY, None
        version.footprint_bytes = self.mb * MB

    async def evict(self, version: Version) -> None:
        self.evictions.append(version.model)
        version.state = VersionState.UNLOADED

    def residency(self, budget_mb: float = 0, count: int = 0, **kwargs: object) -> Residency:
        return Residency(
            budget_mb,
            count,
            self.load,
            self.evict,
            lambda: list(self.versions.values()),
            lambda model: model in self.rollout,
            **kwargs,  # type: ignore[arg-type]
        )

    def resident(self) -> set[str]:
        return {name for name, v in self.versions.items() if v.ready}


async def use(residency: Residency, version: Version) -> None:
    async with residency.hold(version, None):
        pass


async def test_the_least_recently_used_idle_version_goes_first() -> None:
    box = Box(["a", "b", "c", "d"])
    residency = box.residency(count=3)
    for name in ("a", "b", "c", "a"):
        await use(residency, box.versions[name])
    await use(residency, box.versions["d"])  # b is the least recently used
    assert box.evictions == ["b"] and box.resident() == {"a", "c", "d"}
    assert box.versions["b"].standby and box.versions["b"].reason == NOT_RESIDENT
    facts = {f.model: f for f in residency.facts()}
    assert facts["b"].evictions == 1 and facts["a"].loads == 1 and facts["d"].resident


async def test_the_memory_budget_counts_measured_footprints_and_files_before_a_load() -> None:
    box = Box(["a", "b", "c"], mb=30)
    # never loaded: budgeted at twice its files (20 MB) until measured (30 MB)
    residency = box.residency(budget_mb=70, disk_bytes=lambda version: 10 * MB)
    await use(residency, box.versions["a"])
    await use(residency, box.versions["b"])  # 30 + 20 fit; measured 30 + 30 fit
    assert box.evictions == []
    await use(residency, box.versions["c"])  # 60 + 20 do not: a goes
    assert box.evictions == ["a"] and box.resident() == {"b", "c"}
    await use(residency, box.versions["a"])  # now known: 30 MB, 60 + 30 do not fit: b goes
    assert box.evictions == ["a", "b"]


async def test_in_use_in_a_rollout_or_pinned_versions_are_never_evicted() -> None:
    box = Box(["busy", "rolling", "base", "idle", "new"])
    residency = box.residency(count=4, pinned_anyway=lambda v: v.model == "base")
    box.rollout.add("rolling")
    box.versions["base"].state = VersionState.READY  # (pinned anyway: loaded at start)
    for name in ("busy", "rolling", "idle"):
        await use(residency, box.versions[name])
    held = residency.hold(box.versions["busy"], None)
    await held.__aenter__()  # a request to busy in flight
    await use(residency, box.versions["new"])
    assert box.evictions == ["idle"]
    # nothing idle and on demand is left to make room: refused, nothing touched
    box.versions["more"] = Version("more", 1, box.versions["new"].config)
    box.versions["more"].state = VersionState.UNLOADED
    box.versions["new"].state = VersionState.READY
    residency.enter(box.versions["new"])  # (a generation holds it)
    with pytest.raises(UnavailableError, match="max_loaded_versions 4"):
        await use(residency, box.versions["more"])
    assert box.resident() == {"busy", "rolling", "base", "new"}
    await held.__aexit__(None, None, None)
    await use(residency, box.versions["more"])  # busy is idle now
    assert box.evictions == ["idle", "busy"]


async def test_requests_for_a_cold_version_share_one_load_and_keep_their_deadlines() -> None:
    box = Box(["a", "slow"])
    box.load_s = 0.05
    residency = box.residency()
    await asyncio.gather(*(use(residency, box.versions["a"]) for _ in range(10)))
    assert box.loads == ["a"]
    assert {f.model: f.cold_waits for f in residency.facts()}["a"] == 10
    box.load_s = 0.5
    loop = asyncio.get_running_loop()
    with pytest.raises(DeadlineExceededError, match="outlasted the request's deadline"):
        async with residency.hold(box.versions["slow"], loop.time() + 0.05):
            pass
    # the load goes on for those who can wait
    await use(residency, box.versions["slow"])
    assert box.loads == ["a", "slow"] and box.versions["slow"].ready


async def test_a_pinned_model_is_not_loaded_by_a_request() -> None:
    box = Box(["p"], residency="pinned")
    residency = box.residency(count=1)
    await use(residency, box.versions["p"])
    assert box.loads == [] and not residency.on_demand(box.versions["p"])
