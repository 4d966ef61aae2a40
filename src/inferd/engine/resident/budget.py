"""The budgets that versions in memory are held to (inferd.engine.resident.residency): the host's
resident memory (`model_memory_budget_mb`), their count (`max_loaded_versions`), and each GPU's
device memory (`device_memory_budget_mb`, per device: the versions whose instances run on GPU
d may hold that much of d's memory). What a version needs of each is what its last load was
measured to take (`Version.footprint_bytes`, `Version.device_footprint`), or, before its first
load, `UNMEASURED_FACTOR` times its files' size (on each GPU its configuration places it on).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from inferd.config.model import ModelConfig
from inferd.engine.versions.version import Version
from inferd.runtime.placement import GPU_PROVIDERS, placements

UNMEASURED_FACTOR = 2.0
"""A version never loaded is budgeted at this many times its files' size until its load is
measured (then made room for by what was measured): loads measured here took 1.0 times the file
(a 100 MB tensor model), 2.0 (a 2 MB one) and 5.0 (the demo's minilm: two instances, each with
its weights, and a tokenizer; benchmarks/RESULTS.md, "Many models")."""


def placed_gpus(config: ModelConfig) -> frozenset[int]:
    """The GPUs a version's instances run on (inferd.runtime.placement): each instance group
    of kind gpu on its devices, and `instance_count` instances on a GPU provider on
    `runtime.device_id` (device 0 when unset); empty for a version on the CPU only."""
    return frozenset(
        placement.options.device_id or 0
        for placement in placements(config)
        if any(provider in GPU_PROVIDERS for provider in placement.options.providers)
    )


@dataclass(frozen=True)
class Need:
    """What a version holds, or is expected to hold, in memory."""

    host: int
    devices: dict[int, int] = field(default_factory=dict)
    """Bytes per GPU index (nothing for a version on the CPU only)."""


@dataclass(frozen=True)
class Shortfall:
    """The budget a load would go over."""

    setting: str
    """max_loaded_versions, model_memory_budget_mb or device_memory_budget_mb."""
    held: int
    """What the versions in memory hold of it (versions or bytes)."""
    need: int
    gpu: int | None = None
    """The device whose memory lacks room (device_memory_budget_mb)."""

    def figures(self) -> dict[str, object]:
        """For a log line: which budget, what is held of it and what is needed."""
        if self.setting == "max_loaded_versions":
            return {"budget": self.setting, "held_versions": self.held}
        held = {"held_mb": mb(self.held), "need_mb": mb(self.need)}
        return {"budget": self.setting, "gpu": self.gpu, **held}

    def frees(self, version: Version, needs: Callable[[Version], Need]) -> bool:
        """Whether evicting `version` makes room for this: any version frees a place and host
        memory; device memory only a version that holds some on that device."""
        return self.gpu is None or needs(version).devices.get(self.gpu, 0) > 0


class Budget:
    def __init__(
        self,
        host_mb: float,
        max_versions: int,
        device_mb: float,
        disk_bytes: Callable[[Version], int],
    ) -> None:
        """Each 0 for none; `disk_bytes`: the size of a version's files."""
        self.host = int(host_mb * 2**20)
        self.max_versions = max_versions
        self.device = int(device_mb * 2**20)
        self._disk_bytes = disk_bytes

    def need(self, version: Version, kept: int = 0) -> Need:
        """What `version` holds when measured, else its estimate from its files (device
        memory looked at only under a device budget: the CPU path costs nothing more). An
        estimate over what the budget leaves beside `kept` (the bytes of the versions that
        stay in memory: pinned ones) is capped there: the version may still fit (its files
        do, or `never_fits` refuses it), so it loads once every idle version is gone, and
        from then on counts what it was measured to hold."""
        host = version.footprint_bytes
        devices = version.device_footprint if self.device > 0 else {}
        if host is not None and devices is not None:
            return Need(host, devices)
        estimate = int(UNMEASURED_FACTOR * self._disk_bytes(version))
        if devices is None:  # never measured on its devices (or no NVML to measure with)
            on_device = min(estimate, self.device) if self.device > 0 else estimate
            devices = {gpu: on_device for gpu in placed_gpus(version.config)}
        if host is None:
            host = min(estimate, max(self.host - kept, 0)) if self.host > 0 else estimate
        return Need(host, devices)

    def never_fits(self, name: str, version: Version, kept: int = 0) -> str | None:
        """Why `version` can never load under these budgets, None when it may: what its last
        load measured, else its files' size alone (a load holds at least its weights), over
        what a budget leaves beside `kept` (the versions that stay in memory: pinned ones).
        Says the budget it needs."""
        disk = self._disk_bytes(version)
        measured = version.footprint_bytes
        host = disk if measured is None else measured
        how = "its files alone" if measured is None else "measured at its last load"
        if self.host > 0 and host + kept > self.host:
            beside = f", beside the {mb(kept)} MB that pinned models hold" if kept else ""
            return (
                f"{name} can never load under the {mb(self.host)} MB memory budget "
                f"(model_memory_budget_mb): it needs more than {mb(host)} MB ({how}){beside}; "
                f"give the budget at least {mb(host + kept)} MB, or pin the model "
                "(residency: pinned)"
            )
        if self.device > 0:
            measured_devices = version.device_footprint or {}
            for gpu in sorted(placed_gpus(version.config)):
                wanted = measured_devices.get(gpu, disk)
                how = "its files alone" if gpu not in measured_devices else "measured"
                if wanted > self.device:
                    return (
                        f"{name} can never load on GPU {gpu} under the {mb(self.device)} MB "
                        f"device memory budget (device_memory_budget_mb): it needs more than "
                        f"{mb(wanted)} MB there ({how}); give the budget at least "
                        f"{mb(wanted)} MB"
                    )
        return None

    def shortfall(self, resident: Sequence[Version], coming: Need) -> Shortfall | None:
        """The first budget that the versions `resident` and one more needing `coming` go
        over: the count, then host memory, then each GPU's; None when all fit."""
        if self.max_versions > 0 and len(resident) + 1 > self.max_versions:
            return Shortfall("max_loaded_versions", len(resident), 1)
        if self.host > 0:
            held = sum(v.footprint_bytes or 0 for v in resident)
            if held + coming.host > self.host:
                return Shortfall("model_memory_budget_mb", held, coming.host)
        if self.device > 0:
            for gpu, wanted in sorted(coming.devices.items()):
                held = sum(self.need(v).devices.get(gpu, 0) for v in resident)
                if wanted > 0 and held + wanted > self.device:
                    return Shortfall("device_memory_budget_mb", held, wanted, gpu)
        return None

    def no_room(self, name: str, short: Shortfall) -> str:
        """The reason a load of `name` is refused (5030)."""
        if short.setting == "max_loaded_versions":
            return (
                f"{name} cannot load: {short.held} versions are in memory (max_loaded_versions "
                f"{self.max_versions}) and none is idle and on demand; retry later"
            )
        if short.gpu is None:
            return (
                f"{name} cannot load: it needs about {mb(short.need)} MB and the versions in "
                f"memory hold {mb(short.held)} MB of the {mb(self.host)} MB budget "
                "(model_memory_budget_mb), none of it idle and on demand; retry later"
            )
        return (
            f"{name} cannot load: it needs about {mb(short.need)} MB on GPU {short.gpu} and the "
            f"versions there hold {mb(short.held)} MB of its {mb(self.device)} MB budget "
            "(device_memory_budget_mb), none of it idle and on demand; retry later"
        )


def mb(size: int | None) -> float | None:
    return None if size is None else round(size / 2**20, 1)


def device_mb(devices: dict[int, int] | None) -> dict[str, float] | None:
    """Bytes per GPU as MB per GPU index, for log lines and the status page."""
    return None if not devices else {str(gpu): round(n / 2**20, 1) for gpu, n in devices.items()}
