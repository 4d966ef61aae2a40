"""The loader: turns repository entries into serving versions, at start-up (in the background,
with fallback to an older version) and on the admin's load and unload.

Which servable a model becomes is its kind's (inferd.config.kinds: `servable`); a kind built
over a base (zero-shot) is built over its base model's servable once the bases are up. Loading
a version never raises: a failure is recorded on the version (its state and reason) and logged,
and the other models serve.
"""

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
from inferd.config.model import ModelConfig, RuntimeOptions
from inferd.config.server import ServerSettings
from inferd.engine.build import BuildContext
from inferd.engine.heap import settle
from inferd.engine.loading import LoadedModel, load_instances
from inferd.engine.memory import release_freed, resident_bytes
from inferd.engine.registry import Registry
from inferd.engine.residency import NOT_RESIDENT
from inferd.engine.servable import Servable
from inferd.engine.version import Version, VersionState
from inferd.errors import (
    ConfigError,
    InferdError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)
from inferd.observability.observer import Observer
from inferd.repository.scan import ModelEntry, scan_model, task_defaults, valid_name
from inferd.runtime.protocol import Runtime

log = logging.getLogger(__name__)

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


class Loader:
    def __init__(
        self,
        registry: Registry,
        settings: ServerSettings,
        runtime_loader: RuntimeLoader,
        observer: Observer,
        root: Path | None,
        draining: Callable[[], bool],
        in_flight: Callable[[], int],
        select: Callable[[ModelEntry], ModelEntry] = lambda entry: entry,
        on_demand: Callable[[Version], bool] = lambda version: False,
    ) -> None:
        """`draining`: whether the server drains; `in_flight`: the requests it holds;
        `select`: the serving policy, which versions of a scanned model serve
        (inferd.engine.rollout.policy); `on_demand`: a version left unloaded at start, for
        its first request to load (inferd.engine.residency)."""
        self._registry = registry
        self._settings = settings
        self._runtime_loader = runtime_loader
        self._observer = observer
        self._root = root
        self._draining = draining
        self._in_flight = in_flight
        self._select = select
        self._on_demand = on_demand
        self.done = False
        """Start-up loading has finished (whatever its outcome)."""
        self._model_locks: dict[str, asyncio.Lock] = {}
        """One admin change per model at a time: a second load or unload waits for the first."""

    # -- start-up --------------------------------------------------------------------------

    async def load_all(self) -> None:
        """Loads every selected version, `load_concurrency` at a time. Never raises."""
        registry = self._registry
        for name, error in registry.errors().items():
            log.error("model not loaded", extra={"model": name, "reason": error})
        limit = asyncio.Semaphore(self._settings.load_concurrency)

        async def load(entry: ModelEntry, version: Version) -> None:
            async with limit:
                await self._load_version(entry, version)

        jobs = []
        for version in registry.all_versions():
            if not version.config.needs_versions:
                continue
            if self._on_demand(version):
                version.state, version.reason = VersionState.UNLOADED, NOT_RESIDENT
                continue
            jobs.append(load(registry.entries[version.model], version))
        try:
            await asyncio.gather(*jobs)
            for name in registry.models():
                await self._fall_back(name)
            for version in list(registry.all_versions()):  # derived models, once bases are up
                if not version.config.needs_versions:
                    await self._load_zero_shot(version)
        finally:
            self.done = True
            settle()
        ready = sum(v.ready for v in registry.all_versions())
        log.info("model loading finished", extra={"ready_versions": ready})

    async def _fall_back(self, name: str) -> bool:
        """With a `latest` policy and no selected version serving, the newest older version
        that loads serves instead: a broken new version never takes the model down."""
        entry = self._registry.entries[name]
        config = entry.config
        versions = self._registry.versions_map(name)
        if config is None or not config.needs_versions or any(v.ready for v in versions.values()):
            return True
        if any(v.standby for v in versions.values()):
            return True  # (loaded by its first request; a failure then is that request's)
        policy = config.version_policy
        if policy.all or policy.specific is not None:
            return False
        for candidate in sorted(entry.available, key=lambda v: -v.version):
            if candidate.version in versions:
                continue
            version = Version(name, candidate.version, config)
            versions[candidate.version] = version
            await self._load_version(entry, version)
            if version.ready:
                log.warning(
                    "serving an older version: the selected ones failed to load",
                    extra={"model": name, "version": candidate.version},
                )
                for failed in versions.values():
                    if failed.state is VersionState.FAILED:
                        failed.superseded = True  # reported, but the model serves
                return True
        return False

    async def _load_version(self, entry: ModelEntry, version: Version) -> None:
        config = version.config
        path = next(v.path for v in entry.available if v.version == version.version)
        loop = asyncio.get_running_loop()
        before = resident_bytes()
        try:
            loaded: LoadedModel = await loop.run_in_executor(
                None,
                load_instances,
                config,
                lambda options: self._runtime_loader(path, options),
                path.parent,
            )
        except Exception as exc:  # any failure: bad file, bad overrides, warm-up error
            self._failed(version, exc, "model version failed to load")
            return
        if self._draining():
            await loop.run_in_executor(None, loaded.pool.close)
            version.fail("the server began draining while this version loaded")
            return
        # a lone request's batch on the loop's own thread (inferd.runtime.pool)
        loaded.pool.inline_when_quiet(config.solo_inline_ms / 1000, lambda: self._in_flight() <= 1)
        context = BuildContext(
            version.model,
            version.version,
            config,
            loaded,
            self._observer,
            version.watch(self._observer),
        )
        try:
            servable = servable_class(config.kind).build(context)
        except Exception as exc:  # the parts do not fit the task (caught before any request)
            await loop.run_in_executor(None, loaded.pool.close)
            self._failed(version, exc, "model version failed to load")
            return
        version.serve(servable, loaded.load_s, self._settings.response_cache)
        # (loads at once share the difference: exact with load_concurrency 1, and on demand)
        version.footprint_bytes = max(resident_bytes() - before, 0)
        self._registry.mark_loaded(version.model, int(time.time()))
        log.info(
            "model version ready",
            extra={
                "model": version.model,
                "version": version.version,
                "load_ms": round(loaded.load_s * 1000, 1),
                "providers": list(servable.providers),
                "footprint_mb": round(version.footprint_bytes / 2**20, 1),
                "instances": [load.name for load in servable.instances],
            },
        )

    async def _load_zero_shot(self, version: Version) -> None:
        zero_shot = version.config.zero_shot
        if zero_shot is None:
            return
        try:
            base = self._registry.resolve(zero_shot.base_model).servable
            servable = await servable_class(version.config.kind).build(
                version.model, version.config, base, self._observer
            )
        except Exception as exc:  # the base is missing, failed, or cannot embed the labels
            self._failed(version, exc, "zero-shot model failed to load")
            return
        version.serve(servable, cache_allowed=self._settings.response_cache)
        self._registry.mark_loaded(version.model, int(time.time()))
        log.info(
            "zero-shot model ready",
            extra={
                "model": version.model,
                "base": zero_shot.base_model,
                "labels": len(zero_shot.labels),
            },
        )

    @staticmethod
    def _failed(version: Version, exc: BaseException, message: str) -> None:
        reason = _reason(exc)
        version.fail(reason)
        log.error(
            message, extra={"model": version.model, "version": version.version, "reason": reason}
        )

    # -- repository changes (admin) -------------------------------------------------------

    async def load_model(self, name: str) -> Version:
        """Reads a model's folder again and loads the versions the serving policy selects that
        do not serve yet. Versions no longer selected are drained and closed only once a selected
        version serves: a new version that fails to load leaves the previous one serving. A
        second call for the same model waits for the first, then finds its versions serving."""
        if self._root is None or not valid_name(name) or not (self._root / name).is_dir():
            raise NotFoundError(f"no model folder '{name}' in the repository")
        async with self._model_locks.setdefault(name, asyncio.Lock()):
            return await self._load_model(name, self._root / name)

    async def _load_model(self, name: str, folder: Path) -> Version:
        entry = self._select(scan_model(folder))
        if entry.error is not None or entry.config is None:
            raise InvalidInputError(f"model '{name}' cannot load: {entry.error}")
        if not entry.config.needs_versions:
            raise InvalidInputError("a zero-shot model follows its base model; load that one")
        try:
            task_defaults([*self._registry.serving_entries(besides=name), entry])
        except ConfigError as exc:
            raise InvalidInputError(f"model '{name}' cannot load: {exc}") from exc
        self._registry.register_entry(entry)
        current = self._registry.versions_map(name)
        fresh = []
        for selected in entry.versions:
            existing = current.get(selected.version)
            if existing is not None and existing.ready:
                continue
            version = Version(name, selected.version, entry.config)
            current[selected.version] = version
            fresh.append(version)
        for version in fresh:
            await self._load_version(entry, version)
        chosen = {v.version for v in entry.versions}
        if not any(current[v].ready for v in chosen if v in current):
            failures = "; ".join(f"version {v.version}: {v.reason}" for v in fresh if v.reason)
            for version in fresh:
                current.pop(version.version, None)
            serving = sorted(n for n, v in current.items() if v.ready)
            raise UnavailableError(
                f"model '{name}' did not load ({failures}); still serving: {serving or 'none'}"
            )
        for number in sorted(set(current) - chosen):
            retired = current.pop(number)
            await retired.drain(self._settings.drain_timeout_s)
            await retired.close()
            log.info("version retired", extra={"model": name, "version": number})
        self._registry.changed()
        self._registry.mark_loaded(name, int(time.time()))
        settle()
        return self._registry.resolve(name)

    def _version_entry(self, name: str, number: int) -> tuple[ModelEntry, ModelConfig]:
        """A served model's folder as it is now, holding a loadable version `number`, and its
        config (4040 for an unknown model or a missing version folder, 4004 for a model that
        cannot load)."""
        if self._root is None or name not in self._registry.models():
            raise NotFoundError(f"unknown model '{name}'")
        entry = scan_model(self._root / name)
        if entry.error is not None or entry.config is None:
            raise InvalidInputError(f"model '{name}' cannot load: {entry.error}")
        if number not in {v.version for v in entry.available}:
            raise NotFoundError(f"model '{name}' has no version folder '{number}'")
        return entry, entry.config

    async def add_version(self, name: str, number: int) -> Version:
        """Loads version `number` of a served model beside the versions serving, whatever its
        version policy selects (a rollout's candidate, or its stable version after a
        restart). A version that fails to load is dropped, never served: 5030 with why."""
        if self._root is None or name not in self._registry.models():
            raise NotFoundError(f"unknown model '{name}'")
        async with self._model_locks.setdefault(name, asyncio.Lock()):
            entry, config = self._version_entry(name, number)
            current = self._registry.versions_map(name)
            existing = current.get(number)
            if existing is not None and existing.ready:
                return existing
            version = Version(name, number, config)
            current[number] = version
            await self._load_version(entry, version)
            if not version.ready:
                current.pop(number, None)
                raise UnavailableError(
                    f"model '{name}' version {number} did not load: {version.reason}"
                )
            self._registry.changed()
            settle()
            return version

    async def load_baseline(self, name: str, number: int) -> Version:
        """A second instance of version `number` of a served model, outside the registry (a
        rollout's baseline: the rollout holds it, routes to it and closes it). A version
        that fails to load is closed: 5030 with why."""
        if self._root is None or name not in self._registry.models():
            raise NotFoundError(f"unknown model '{name}'")
        async with self._model_locks.setdefault(name, asyncio.Lock()):
            entry, config = self._version_entry(name, number)
            version = Version(name, number, config)
            await self._load_version(entry, version)
            if not version.ready:
                raise UnavailableError(
                    f"model '{name}' version {number} (baseline) did not load: {version.reason}"
                )
            settle()
            return version

    async def close_baseline(self, version: Version) -> None:
        """Drains and closes a baseline (`load_baseline`)."""
        await version.drain(self._settings.drain_timeout_s)
        await version.close()
        settle()
        log.info("baseline closed", extra={"model": version.model, "version": version.version})

    async def load_resident(self, version: Version) -> None:
        """Loads a registered version that is not in memory, in place (residency: on demand);
        its state and reason say how it went."""
        async with self._model_locks.setdefault(version.model, asyncio.Lock()):
            if version.ready:
                return
            # (no collection here, others serve: inferd.engine.residency settles later)
            await self._load_version(self._registry.entries[version.model], version)

    def disk_bytes(self, version: Version) -> int:
        """The size of a version's folder (its model file, external weights, tokenizer)."""
        entry = self._registry.entries.get(version.model)
        found = [v.path for v in entry.available if v.version == version.version] if entry else []
        if not found:
            return 0
        folder = found[0].parent
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    async def evict(self, version: Version) -> None:
        """Drains and closes a version, which stays registered (residency: on demand); the
        memory its runtime freed goes back to the system."""
        async with self._model_locks.setdefault(version.model, asyncio.Lock()):
            await version.drain(self._settings.drain_timeout_s)
            await version.close()
            await asyncio.get_running_loop().run_in_executor(None, release_freed)

    async def retire_version(self, name: str, number: int) -> None:
        """Drains and closes one version of a model; the others keep serving."""
        async with self._model_locks.setdefault(name, asyncio.Lock()):
            retired = self._registry.versions_map(name).pop(number, None)
            if retired is None:
                return
            await retired.drain(self._settings.drain_timeout_s)
            await retired.close()
            self._registry.changed()
            settle()
            log.info("version retired", extra={"model": name, "version": number})

    async def unload_model(self, name: str) -> None:
        """Drains and closes every version of a model; it then answers 404 until loaded."""
        async with self._model_locks.setdefault(name, asyncio.Lock()):
            await self._unload_model(name)

    async def _unload_model(self, name: str) -> None:
        versions = self._registry.remove_model(name)
        for version in versions.values():
            await version.drain(self._settings.drain_timeout_s)
            await version.close()
        settle()
        log.info("model unloaded", extra={"model": name})


def _reason(exc: BaseException) -> str:
    if isinstance(exc, InferdError):
        return exc.message
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__
