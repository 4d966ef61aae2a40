"""A model version as the registry holds it: identity, configuration, state and statistics,
and, once loaded, the servable that answers its requests.

Created LOADING; `serve` makes it READY with its servable; `fail` records why it is not. The
servable's kind (tensor, text, zero-shot, generation) is the servable's business: a version
only knows whether it serves.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

from inferd.config.model import ModelConfig
from inferd.engine.kinds.servable import ParameterSpec, Servable
from inferd.engine.requests.cached import Answer
from inferd.engine.requests.response_cache import MISS, ResponseCache
from inferd.errors import UnavailableError
from inferd.observability.observer import (
    BatchRan,
    Event,
    MemoryPressure,
    Observer,
    Unhealthy,
    notify,
)
from inferd.observability.stats import VersionStats
from inferd.runtime.dispatch import InstanceLoad
from inferd.runtime.protocol import TensorSpec

log = logging.getLogger(__name__)


class VersionState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    FAILED = "FAILED"
    UNLOADED = "UNLOADED"


class Version:
    def __init__(self, model: str, version: int, config: ModelConfig) -> None:
        self.model = model
        self.version = version
        self.config = config
        self.state = VersionState.LOADING
        self.reason: str | None = None
        self.superseded = False
        """Failed, but an older version serves in its place (readiness is not held back)."""
        self.load_s: float | None = None
        self.footprint_bytes: int | None = None
        """What its last load added to the process's resident memory
        (inferd.engine.resident.residency)."""
        self.device_footprint: dict[int, int] | None = None
        """What its last load added to the memory used on each GPU its instances run on (by
        GPU index; empty on the CPU only; None until measured, or without NVML to measure)."""
        self.stats = VersionStats(model, version)
        self._servable: Servable | None = None
        self.cache: ResponseCache[Answer] | None = None
        """Its response cache, when its model has one (the engine looks requests up in it)."""

    @property
    def ready(self) -> bool:
        return self.state is VersionState.READY

    @property
    def standby(self) -> bool:
        """Not in memory, and loaded by its next request (an `on_demand` version)."""
        return self.state is VersionState.UNLOADED and self.config.residency == "on_demand"

    @property
    def task(self) -> str:
        return self.config.task

    @property
    def batched(self) -> bool:
        return self.config.max_batch_size > 0

    def ensure_ready(self) -> None:
        """5030, with the state and the reason, while this version does not serve."""
        if self._servable is None or self.state is not VersionState.READY:
            raise UnavailableError(
                f"model '{self.model}' version {self.version} is not ready "
                f"({self.state.value.lower()})" + (f": {self.reason}" if self.reason else "")
            )

    @property
    def servable(self) -> Servable:
        """What answers this version's requests (5030 while it does not serve)."""
        self.ensure_ready()
        if self._servable is None:  # for the type checker: ensure_ready raised
            raise UnavailableError(f"model '{self.model}' version {self.version} is not loaded")
        return self._servable

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self._servable.inputs if self._servable is not None else ()

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self._servable.outputs if self._servable is not None else ()

    @property
    def graph_inputs(self) -> tuple[TensorSpec, ...]:
        """The model file's inputs (its configuration's `input`)."""
        return self._servable.graph_inputs if self._servable is not None else ()

    @property
    def graph_outputs(self) -> tuple[TensorSpec, ...]:
        return self._servable.graph_outputs if self._servable is not None else ()

    @property
    def parameters(self) -> tuple[ParameterSpec, ...]:
        return self._servable.parameters if self._servable is not None else ()

    @property
    def providers(self) -> tuple[str, ...]:
        return self._servable.providers if self._servable is not None else ()

    @property
    def queued_items(self) -> int:
        return self._servable.queued_items if self._servable is not None else 0

    @property
    def queued_requests(self) -> int:
        return self._servable.queued_requests if self._servable is not None else 0

    @property
    def kv_usage(self) -> tuple[int, int] | None:
        return self._servable.kv_usage if self._servable is not None and self.ready else None

    @property
    def instances(self) -> Sequence[InstanceLoad]:
        return self._servable.instances if self._servable is not None else ()

    def serve(
        self, servable: Servable, load_s: float | None = None, cache_allowed: bool = True
    ) -> None:
        """Serves with `servable`, with a response cache of its own when the model has one and
        the server allows it (so a version that is retired or reloaded takes its answers with
        it)."""
        cache = self.config.response_cache
        if cache.enabled and cache_allowed:
            self.cache = ResponseCache(int(cache.max_mb * 2**20), cache.ttl_s)
        self._servable = servable
        self.load_s = load_s
        self.state = VersionState.READY

    def cache_lookup(self, how: str, seconds: float) -> None:
        # a coalesced request did not run either: Triton's statistics count it as a hit
        self.stats.on_cache_lookup(how != MISS, seconds)

    def fail(self, reason: str) -> None:
        self.state = VersionState.FAILED
        self.reason = reason

    def watch(self, observer: Observer) -> Observer:
        """The observer this version's batcher reports to: its statistics and health, then
        `observer` (the engine's)."""
        return _VersionWatch(self, observer)

    async def drain(self, timeout_s: float) -> bool:
        return True if self._servable is None else await self._servable.drain(timeout_s)

    async def stop(self) -> None:
        """Answers what is queued and running with 5030 now (see `Servable.stop`)."""
        if self._servable is not None:
            await self._servable.stop()

    async def close(self) -> None:
        servable, self._servable = self._servable, None
        if self.cache is not None:
            self.cache.clear()
            self.cache = None
        if servable is not None:
            await servable.close()
        self.state = VersionState.UNLOADED


class _VersionWatch(Observer):
    def __init__(self, version: Version, outer: Observer) -> None:
        self._version = version
        self._outer = outer

    def observe(self, event: Event) -> None:
        if isinstance(event, BatchRan):
            self._version.stats.on_batch(event.record)
        elif isinstance(event, MemoryPressure):
            self._version.stats.memory_pressure_events += 1
        elif isinstance(event, Unhealthy):
            log.error("version unhealthy", extra={"model": event.model, "version": event.version})
            self._version.fail(event.reason)
        notify(self._outer, event)
