"""Loading one version: its runtime instances, warmed up off the event loop
(inferd.engine.versions.loading), then the servable its kind names (inferd.config.kinds:
`servable`), built over them; a kind built over a base (zero-shot) is built over its base
model's servable. Loading never raises: a failure is recorded on the version (its state and
reason) and logged."""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferd.config.kinds import Kind
from inferd.config.model import RuntimeOptions
from inferd.config.server_settings import ServerSettings
from inferd.engine.kinds.build import BuildContext
from inferd.engine.kinds.servable import Servable
from inferd.engine.requests.admission import Admission
from inferd.engine.requests.memory_admission import resident_bytes
from inferd.engine.resident.budget import device_mb, placed_gpus
from inferd.engine.versions.loading import LoadedModel, load_instances
from inferd.engine.versions.registry import Registry
from inferd.engine.versions.version import Version
from inferd.errors import InferdError
from inferd.observability.gpu import device_memory_used
from inferd.observability.observer import Observer
from inferd.repository.scan import ModelEntry
from inferd.runtime.placement import available_cores
from inferd.runtime.pool import close_off_loop
from inferd.runtime.protocol import Runtime
from inferd.runtime.share import RuntimeShare

log = logging.getLogger("inferd.engine.versions.loader")  # (the loader's lines keep its name)

RuntimeLoader = Callable[[Path, RuntimeOptions], Runtime]
"""Opens one runtime instance of a model file (the composition root chooses: ONNX Runtime)."""


@functools.cache
def servable_class(kind: Kind) -> Any:
    """The servable class its kind names (`module:Class`), imported once."""
    module, _, name = kind.servable.partition(":")
    found = getattr(importlib.import_module(module), name)
    if not (isinstance(found, type) and issubclass(found, Servable)):
        raise TypeError(f"{kind.servable} is not a servable")
    return found


class VersionLoader:
    def __init__(
        self,
        registry: Registry,
        settings: ServerSettings,
        runtime_loader: RuntimeLoader,
        observer: Observer,
        admission: Admission,
    ) -> None:
        """`admission`: whether the server drains (a version loaded then is closed) and the
        requests it holds (a lone one may run on the loop's thread)."""
        self._registry = registry
        self._settings = settings
        self._runtime_loader = runtime_loader
        self._observer = observer
        self._admission = admission
        self._share = RuntimeShare(available_cores())
        """The machine's cores between the models' runs, by their weights."""

    def _quiet(self) -> bool:
        """Whether the server holds no request but the caller's."""
        return self._admission.in_flight <= 1

    async def load(self, entry: ModelEntry, version: Version) -> None:
        """Loads `version` of `entry` and serves it; a failure is the version's."""
        config = version.config
        path = next(v.path for v in entry.available if v.version == version.version)
        loop = asyncio.get_running_loop()
        before = resident_bytes()
        gpus = placed_gpus(config)
        device_before = device_memory_used(gpus)  # (no GPU placed: NVML is not looked at)
        try:
            loaded: LoadedModel = await loop.run_in_executor(
                None,
                load_instances,
                config,
                lambda options: self._runtime_loader(path, options),
                path.parent,
            )
        except Exception as exc:  # any failure: bad file, bad overrides, warm-up error
            _failed(version, exc, "model version failed to load")
            return
        if self._admission.draining:
            await close_off_loop(loaded.pool)
            version.fail("the server began draining while this version loaded")
            return
        # a lone request's batch on the loop's own thread (inferd.runtime.pool)
        loaded.pool.inline_when_quiet(config.solo_inline_ms / 1000, self._quiet)
        # its runs take the model's turns on the cores beside the other models'
        loaded.pool.share_cores(self._share.model(version.model, config.weight))
        context = BuildContext(
            version.model,
            version.version,
            config,
            loaded,
            self._observer,
            version.watch(self._observer),
            self._settings.max_request_rows,
            self._quiet,
        )
        try:
            servable = servable_class(config.kind).build(context)
        except Exception as exc:  # the parts do not fit the task (caught before any request)
            await close_off_loop(loaded.pool)
            _failed(version, exc, "model version failed to load")
            return
        version.serve(servable, loaded.load_s, self._settings.response_cache)
        # (loads at once share the difference: exact with load_concurrency 1, and on demand)
        version.footprint_bytes = max(resident_bytes() - before, 0)
        version.device_footprint = _device_delta(gpus, device_before, device_memory_used(gpus))
        self._registry.mark_loaded(version.model, int(time.time()))
        extra: dict[str, object] = {
            "model": version.model,
            "version": version.version,
            "load_ms": round(loaded.load_s * 1000, 1),
            "providers": list(servable.providers),
            "footprint_mb": round(version.footprint_bytes / 2**20, 1),
            "instances": [load.name for load in servable.instances],
        }
        if version.device_footprint:
            extra["device_mb"] = device_mb(version.device_footprint)
        log.info("model version ready", extra=extra)

    async def load_zero_shot(self, version: Version) -> None:
        """Builds a zero-shot version over its base model's servable (which must be up)."""
        zero_shot = version.config.zero_shot
        if zero_shot is None:
            return
        try:
            base = self._registry.resolve(zero_shot.base_model).servable
            servable = await servable_class(version.config.kind).build(
                version.model, version.config, base, self._observer
            )
        except Exception as exc:  # the base is missing, failed, or cannot embed the labels
            _failed(version, exc, "zero-shot model failed to load")
            return
        version.serve(servable, cache_allowed=self._settings.response_cache)
        version.device_footprint = {}  # (built over its base's instances: nothing of its own)
        self._registry.mark_loaded(version.model, int(time.time()))
        log.info(
            "zero-shot model ready",
            extra={
                "model": version.model,
                "base": zero_shot.base_model,
                "labels": len(zero_shot.labels),
            },
        )


def _device_delta(
    gpus: frozenset[int], before: dict[int, int], after: dict[int, int]
) -> dict[int, int] | None:
    """What a load added to the memory used on each of its GPUs: empty on the CPU only, None
    when it could not be read (no NVML)."""
    if not gpus:
        return {}
    if not before or not after:
        return None
    return {gpu: max(after[gpu] - used, 0) for gpu, used in before.items() if gpu in after}


def _failed(version: Version, exc: BaseException, message: str) -> None:
    reason = _reason(exc)
    version.fail(reason)
    log.error(message, extra={"model": version.model, "version": version.version, "reason": reason})


def _reason(exc: BaseException) -> str:
    if isinstance(exc, InferdError):
        return exc.message
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__
