"""Residency on fake loads: which version is evicted, what is never evicted, when a load is
refused, and that requests arriving for a cold version share one load.

The device-memory budget is driven by a fake GPU: this machine has none, so a version placed on
a GPU (its `instance_groups`) is "loaded" by reporting the device memory its load would have
been measured to add through NVML (`Version.device_footprint`, by GPU index). The GPU is the
one thing mocked here; the budget's arithmetic and the evictions are Residency's own."""

from __future__ import annotations

import asyncio

import pytest

from inferd.clients import Client, client_scope
from inferd.config.model import InstanceGroup, ModelConfig
from inferd.engine.resident.eviction import NOT_RESIDENT
from inferd.engine.resident.load_limits import LoadLimits
from inferd.engine.resident.residency import Residency
from inferd.engine.versions.version import Version, VersionState
from inferd.errors import (
    DeadlineExceededError,
    ModelTooLargeError,
    NotFoundError,
    TooManyLoadsError,
    UnavailableError,
)

MB = 2**20


class Holding:
    """A box as residency's holdings: its versions, and the rest from the box itself."""

    def __init__(self, box: Box) -> None:
        self._box = box

    def versions(self) -> list[Version]:
        return list(self._box.versions.values())

    def in_rollout(self, model: str) -> bool:
        return self._box.in_rollout(model)

    def pinned_anyway(self, version: Version) -> bool:
        return self._box.pinned_anyway(version)

    def disk_bytes(self, version: Version) -> int:
        return self._box.disk_bytes(version)

    async def load_resident(self, version: Version) -> None:
        await self._box.load_resident(version)

    async def evict(self, version: Version) -> None:
        await self._box.evict(version)


class Box:
    """Versions and the loads and evictions done to them: residency's holdings
    (inferd.engine.resident.holdings.Holdings)."""

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
        self.pinned: set[str] = set()
        """Models kept like pinned ones (a zero-shot model's base)."""
        self.disk_mb = 0
        """Each version's files (what a version never loaded is budgeted from)."""

        self.on_gpu: dict[str, dict[int, int]] = {}
        """MB each version's load adds on each fake GPU (a version not here: the CPU only)."""

    def place(self, name: str, host_mb: int | None, **gpus_mb: int) -> Version:
        """A version on the fake GPUs named `gpu<N>=<MB>` (none: on the CPU only), whose
        loads take `host_mb` and those MB: measured by an earlier load (an evicted version
        remembers), or never loaded when `host_mb` is None (its load takes `mb` of the host)."""
        on = {int(gpu.removeprefix("gpu")): size for gpu, size in gpus_mb.items()}
        groups = [InstanceGroup(kind="gpu", gpus=(gpu,)) for gpu in on] or [InstanceGroup()]
        version = Version(name, 1, ModelConfig(residency="on_demand", instance_groups=groups))
        version.state, version.reason = VersionState.UNLOADED, NOT_RESIDENT
        if host_mb is not None:
            version.footprint_bytes = host_mb * MB
            version.device_footprint = {gpu: size * MB for gpu, size in on.items()}
        self.versions[name] = version
        self.on_gpu[name] = on
        return version

    def in_rollout(self, model: str) -> bool:
        return model in self.rollout

    def pinned_anyway(self, version: Version) -> bool:
        return version.model in self.pinned

    def disk_bytes(self, version: Version) -> int:
        return self.disk_mb * MB

    async def load_resident(self, version: Version) -> None:
        self.loads.append(version.model)
        await asyncio.sleep(self.load_s)
        version.state, version.reason = VersionState.READY, None
        version.footprint_bytes = version.footprint_bytes or self.mb * MB
        on = self.on_gpu.get(version.model, {})
        version.device_footprint = {gpu: size * MB for gpu, size in on.items()}

    async def evict(self, version: Version) -> None:
        self.evictions.append(version.model)
        version.state = VersionState.UNLOADED

    def residency(self, budget_mb: float = 0, count: int = 0, **kwargs: object) -> Residency:
        """Residency over this box (its versions, rollouts, loads and evictions)."""
        return Residency(budget_mb, count, Holding(self), **kwargs)  # type: ignore[arg-type]

    def resident(self) -> set[str]:
        return {name for name, v in self.versions.items() if v.ready}


async def use(residency: Residency, version: Version, within_s: float | None = None) -> None:
    """One request to `version`, with a deadline `within_s` from now (None: none)."""
    deadline = None if within_s is None else asyncio.get_running_loop().time() + within_s
    async with residency.hold(version, deadline):
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
    box.disk_mb = 10
    residency = box.residency(budget_mb=70)
    await use(residency, box.versions["a"])
    await use(residency, box.versions["b"])  # 30 + 20 fit; measured 30 + 30 fit
    assert box.evictions == []
    await use(residency, box.versions["c"])  # 60 + 20 do not: a goes
    assert box.evictions == ["a"] and box.resident() == {"b", "c"}
    await use(residency, box.versions["a"])  # now known: 30 MB, 60 + 30 do not fit: b goes
    assert box.evictions == ["a", "b"]


async def test_in_use_in_a_rollout_or_pinned_versions_are_never_evicted() -> None:
    box = Box(["busy", "rolling", "base", "idle", "new"])
    box.pinned = {"base"}
    residency = box.residency(count=4)
    box.rollout.add("rolling")
    box.versions["base"].state = VersionState.READY  # (pinned anyway: loaded at start)
    for name in ("busy", "rolling", "idle"):
        await use(residency, box.versions[name])
    held = residency.hold(box.versions["busy"], None)
    await held.__aenter__()  # a request to busy in flight
    await use(residency, box.versions["new"])
    assert box.evictions == ["idle"]
    # nothing idle is left to make room: the load waits for one to go idle, and a request
    # whose deadline ends first is refused, nothing touched
    box.versions["more"] = Version("more", 1, box.versions["new"].config)
    box.versions["more"].state = VersionState.UNLOADED
    residency.enter(box.versions["new"])  # (a generation holds it)
    with pytest.raises(UnavailableError, match="max_loaded_versions 4"):
        await use(residency, box.versions["more"], within_s=0.1)
    assert box.resident() == {"busy", "rolling", "base", "new"}
    await held.__aexit__(None, None, None)
    await use(residency, box.versions["more"])  # busy is idle now
    assert box.evictions == ["idle", "busy"]


async def test_a_load_waits_for_a_busy_version_to_go_idle() -> None:
    box = Box(["busy", "cold"])
    residency = box.residency(count=1)
    await use(residency, box.versions["busy"])
    residency.enter(box.versions["busy"])  # a request in flight
    coming = [asyncio.create_task(use(residency, box.versions["cold"])) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(task.done() for task in coming) and box.resident() == {"busy"}
    residency.leave(box.versions["busy"])
    await asyncio.wait_for(asyncio.gather(*coming), 0.1)  # woken at once, not by a poll
    assert box.evictions == ["busy"] and box.loads == ["busy", "cold"]
    assert box.resident() == {"cold"}


async def test_a_load_that_could_not_fit_with_nothing_to_evict_is_refused_at_once() -> None:
    box = Box(["base", "rolling", "cold"])
    box.pinned = {"base"}
    residency = box.residency(count=2)
    box.versions["base"].state = VersionState.READY
    box.rollout.add("rolling")
    await use(residency, box.versions["rolling"])
    started = asyncio.get_running_loop().time()
    with pytest.raises(UnavailableError, match="max_loaded_versions 2"):
        await use(residency, box.versions["cold"])  # no deadline: it would wait for ever
    assert asyncio.get_running_loop().time() - started < 0.1
    assert box.evictions == [] and box.resident() == {"base", "rolling"}


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


async def test_a_gpu_short_of_room_evicts_only_the_versions_holding_its_memory() -> None:
    box = Box([])
    for name, gpus in (("a0", {"gpu0": 40}), ("b0", {"gpu0": 40}), ("c1", {"gpu1": 40})):
        box.place(name, None, **gpus)
    box.place("cpu", None)
    # never loaded: budgeted at twice its files (30 MB) on the GPU it is placed on
    box.disk_mb = 15
    residency = box.residency(device_budget_mb=60)
    for name in ("cpu", "c1", "a0"):
        await use(residency, box.versions[name])
    assert box.evictions == []
    facts = {f.model: f for f in residency.facts()}
    assert facts["a0"].device_footprint == {0: 40 * MB} and facts["cpu"].device_footprint == {}
    # GPU 0 holds 40 MB, b0 is budgeted 30 there: over 60, so a0 goes, though the CPU-only
    # version and the one on GPU 1 were used before it
    await use(residency, box.versions["b0"])
    assert box.evictions == ["a0"] and box.resident() == {"cpu", "c1", "b0"}


async def test_a_version_on_the_cpu_only_is_never_evicted_for_a_gpus_memory() -> None:
    box = Box([])
    box.place("cpu", 10)
    box.place("busy", 10, gpu0=50)
    box.place("coming", 10, gpu0=20)
    residency = box.residency(device_budget_mb=60)
    for name in ("cpu", "busy"):
        await use(residency, box.versions[name])
    residency.enter(box.versions["busy"])  # (a request in flight)
    with pytest.raises(UnavailableError) as refused:
        await use(residency, box.versions["coming"], within_s=0.1)
    assert refused.value.message == (
        "model 'coming' version 1 cannot load: it needs about 20.0 MB on GPU 0 and the versions "
        "there hold 50.0 MB of its 60.0 MB budget (device_memory_budget_mb), none of it idle and "
        "on demand; retry later"
    )
    assert box.evictions == [] and box.resident() == {"cpu", "busy"}
    residency.leave(box.versions["busy"])
    await use(residency, box.versions["coming"])
    assert box.evictions == ["busy"] and box.resident() == {"cpu", "coming"}


async def test_the_host_and_the_device_budgets_are_both_kept() -> None:
    box = Box([])
    box.place("cpu", 50)
    box.place("old", 10, gpu0=40)
    box.place("new", 45, gpu0=40)
    residency = box.residency(budget_mb=100, device_budget_mb=60)
    for name in ("cpu", "old"):
        await use(residency, box.versions[name])
    # host: 60 + 45 over 100, the least recently used goes (cpu); then GPU 0: 40 + 40 over 60,
    # and only old holds memory there
    await use(residency, box.versions["new"])
    assert box.evictions == ["cpu", "old"] and box.resident() == {"new"}


async def test_without_a_device_budget_device_memory_is_not_counted() -> None:
    box = Box([])
    box.place("a", 10, gpu0=500)
    box.place("b", 10, gpu0=500)
    residency = box.residency(budget_mb=100)
    for name in ("a", "b"):
        await use(residency, box.versions[name])
    assert box.evictions == [] and box.resident() == {"a", "b"}


async def test_a_load_waiting_for_room_holds_up_no_load_that_fits() -> None:
    box = Box([])
    box.place("busy0", 10, gpu0=50)
    box.place("coming0", 10, gpu0=20)
    box.place("coming1", 10, gpu1=20)
    residency = box.residency(device_budget_mb=60)
    await use(residency, box.versions["busy0"])
    residency.enter(box.versions["busy0"])  # a request in flight
    waiting = asyncio.create_task(use(residency, box.versions["coming0"]))
    await asyncio.sleep(0.05)
    await asyncio.wait_for(use(residency, box.versions["coming1"]), 0.5)  # GPU 1 has room
    assert not waiting.done() and box.resident() == {"busy0", "coming1"}
    residency.leave(box.versions["busy0"])
    await asyncio.wait_for(waiting, 1.0)
    assert box.evictions == ["busy0"] and box.resident() == {"coming0", "coming1"}


async def test_a_load_that_could_never_fit_evicts_nothing_and_is_refused_at_once() -> None:
    box = Box(["pinned", "busy", "idle", "cold"], mb=10)
    box.versions["pinned"].config = ModelConfig(residency="pinned")
    box.versions["pinned"].state = VersionState.READY
    box.versions["pinned"].footprint_bytes = 80 * MB
    box.versions["cold"].footprint_bytes = 150 * MB  # (measured before: more than the budget)
    residency = box.residency(budget_mb=100)
    await use(residency, box.versions["busy"])
    residency.enter(box.versions["busy"])
    started = asyncio.get_running_loop().time()
    # it can never fit (5071): beside the pinned one's 80 MB, 150 MB is over the 100 MB budget
    with pytest.raises(ModelTooLargeError, match=r"give the budget at least 230\.0 MB"):
        await use(residency, box.versions["cold"], within_s=5.0)
    assert asyncio.get_running_loop().time() - started < 0.1
    # one that would fit once the busy one is gone: nothing idle suffices, nothing goes yet
    box.versions["cold"].footprint_bytes = 15 * MB
    await use(residency, box.versions["idle"])  # 80 + 10 + 10: room for nothing more
    waiting = asyncio.create_task(use(residency, box.versions["cold"], within_s=5.0))
    await asyncio.sleep(0.05)
    assert box.evictions == [] and not waiting.done()
    residency.leave(box.versions["busy"])
    await asyncio.wait_for(waiting, 0.1)
    assert sorted(box.evictions) == ["busy", "idle"] and box.resident() == {"pinned", "cold"}


async def cold_behind_busy(box: Box, within_s: float) -> tuple[Residency, asyncio.Task[None]]:
    """At most one version: `busy`, loaded and in use; a request to `cold` waiting for room."""
    residency = box.residency(count=1)
    await use(residency, box.versions["busy"])
    residency.enter(box.versions["busy"])
    waiting = asyncio.create_task(use(residency, box.versions["cold"], within_s=within_s))
    await asyncio.sleep(0.05)
    return residency, waiting


async def test_a_deadline_that_ends_once_room_is_made_is_the_loads_not_the_rooms() -> None:
    box = Box(["busy", "cold"])
    residency, waiting = await cold_behind_busy(box, within_s=0.2)
    box.load_s = 0.5
    residency.leave(box.versions["busy"])  # room now; the load outlasts the deadline
    with pytest.raises(DeadlineExceededError, match="outlasted the request's deadline"):
        await waiting


async def test_a_version_unloaded_while_its_load_waits_for_room_is_not_loaded() -> None:
    box = Box(["busy", "cold"])
    residency, waiting = await cold_behind_busy(box, within_s=5.0)
    del box.versions["cold"]  # an admin unloads the model
    residency.leave(box.versions["busy"])
    with pytest.raises(NotFoundError, match="unloaded while its load waited"):
        await asyncio.wait_for(waiting, 0.1)
    assert box.evictions == [] and box.loads == ["busy"]


async def test_an_abort_refuses_the_loads_waiting_for_room_at_once() -> None:
    box = Box(["busy", "cold"])
    residency, waiting = await cold_behind_busy(box, within_s=5.0)
    residency.abort()
    with pytest.raises(UnavailableError, match="shutting down"):
        await asyncio.wait_for(waiting, 0.1)
    assert box.evictions == [] and box.loads == ["busy"]


async def test_a_load_whose_version_an_admin_loaded_anew_meanwhile_is_refused_to_retry() -> None:
    box = Box(["busy", "cold"])
    residency, waiting = await cold_behind_busy(box, within_s=5.0)
    fresh = Version("cold", 1, box.versions["cold"].config)  # the admin's load: a new Version
    fresh.state = VersionState.READY
    box.versions["cold"] = fresh
    residency.leave(box.versions["busy"])
    with pytest.raises(UnavailableError, match="loaded by an admin while this load waited"):
        await asyncio.wait_for(waiting, 0.1)
    assert box.evictions == [] and box.loads == ["busy"]


async def test_an_admins_load_makes_room_within_the_budget() -> None:
    box = Box(["a", "b", "c"])
    residency = box.residency(count=2)
    for name in ("a", "b"):
        await use(residency, box.versions[name])
    box.versions["c"].state = VersionState.READY  # loaded by the admin's route, not a request
    evicted = await residency.loaded_by_admin(box.versions["c"])
    assert evicted == [box.versions["a"]]
    assert box.evictions == ["a"] and box.resident() == {"b", "c"}
    assert {f.model: f.loads for f in residency.facts()}["c"] == 1


async def test_only_the_request_that_starts_a_load_counts_against_its_clients_limit() -> None:
    """A version in memory, or already loading, costs its client nothing; a load over the
    client's limit is refused 4291 and starts nothing."""
    box = Box(["a", "b", "c"])
    box.load_s = 0.05
    residency = box.residency(load_limits=LoadLimits(6, 1))
    alice = Client("alice", keyed=True)
    bob = Client("bob", keyed=True)

    async def use_as(client: Client, name: str) -> None:
        with client_scope(client):
            await use(residency, box.versions[name])

    # alice starts a's load; bob's request arrives while it loads: one load, bob pays nothing
    await asyncio.gather(use_as(alice, "a"), use_as(bob, "a"))
    await use_as(alice, "a")  # resident: nothing
    assert box.loads == ["a"]
    with pytest.raises(TooManyLoadsError):
        await use_as(alice, "b")  # alice's one load is spent
    assert box.loads == ["a"] and not box.versions["b"].ready
    await use_as(bob, "b")  # bob's is not
    assert box.loads == ["a", "b"]
