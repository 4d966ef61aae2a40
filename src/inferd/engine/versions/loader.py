"""The loader: turns repository entries into serving versions, at start-up (in the background,
with fallback to an older version), on the admin's load and unload, for rollouts (a candidate
beside the versions serving, a baseline outside the registry) and for residency (a version
loaded on demand, or evicted). One version is loaded by inferd.engine.versions.version_loader, which
never raises: a failure is the version's, and the other models serve. One change per model
runs at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from inferd.config.model import ModelConfig
from inferd.config.server_settings import ServerSettings
from inferd.engine.requests.admission import Admission
from inferd.engine.requests.memory_admission import release_freed
from inferd.engine.resident.heap import settle
from inferd.engine.versions.fallback import fall_back
from inferd.engine.versions.registry import Registry
from inferd.engine.versions.version import Version, VersionState
from inferd.engine.versions.version_loader import RuntimeLoader, VersionLoader
from inferd.errors import ConfigError, InvalidInputError, NotFoundError, UnavailableError
from inferd.observability.observer import Observer
from inferd.repository.scan import (
    ModelEntry,
    one_model,
    scan_model,
    task_defaults,
    valid_name,
)

log = logging.getLogger(__name__)


class Loader:
    def __init__(
        self,
        registry: Registry,
        settings: ServerSettings,
        runtime_loader: RuntimeLoader,
        observer: Observer,
        root: Path | None,
        admission: Admission,
        select: Callable[[ModelEntry], ModelEntry] = lambda entry: entry,
    ) -> None:
        """`admission`: whether the server drains, the requests it holds; `select`: the
        serving policy, which versions of a scanned model serve
        (inferd.engine.rollout.policy)."""
        self._registry = registry
        self._settings = settings
        self._versions = VersionLoader(registry, settings, runtime_loader, observer, admission)
        self._root = root
        self._select = select
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
                await self._versions.load(entry, version)

        jobs = []
        for version in registry.all_versions():
            if not version.config.needs_versions:
                continue
            if version.state is VersionState.UNLOADED:  # on demand: left for its first request
                continue
            jobs.append(load(registry.entries[version.model], version))
        try:
            await asyncio.gather(*jobs)
            for name in registry.models():
                await fall_back(registry, self._versions.load, name)
            for version in list(registry.all_versions()):  # derived models, once bases are up
                if not version.config.needs_versions:
                    await self._versions.load_zero_shot(version)
        finally:
            self.done = True
            settle()
        ready = sum(v.ready for v in registry.all_versions())
        log.info("model loading finished", extra={"ready_versions": ready})

    # -- repository changes (admin) -------------------------------------------------------

    async def load_model(self, name: str) -> tuple[Version, list[Version]]:
        """Reads a model's folder again and loads the versions the serving policy selects that
        do not serve yet. Versions no longer selected are drained and closed only once a selected
        version serves: a new version that fails to load leaves the previous one serving. A
        second call for the same model waits for the first, then finds its versions serving.
        Returns the version that serves and those this call brought into memory."""
        folder = self._folder(name)
        if folder is None or not valid_name(name) or not folder.is_dir():
            raise NotFoundError(f"no model folder '{name}' in the repository")
        async with self._model_locks.setdefault(name, asyncio.Lock()):
            return await self._load_model(name, folder)

    def _folder(self, name: str) -> Path | None:
        """Where model `name`'s files are: its folder, or the top of a repository of one
        model that serves it."""
        if self._root is None:
            return None
        if one_model(self._root):  # its one model, by the name it is served under (unloaded too)
            alone = scan_model(self._root, self._settings.model_name).name
            return self._root if name == alone else self._root / name
        return self._root / name

    async def _load_model(self, name: str, folder: Path) -> tuple[Version, list[Version]]:
        entry = self._select(scan_model(folder, name))
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
            await self._versions.load(entry, version)
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
        return self._registry.resolve(name), [v for v in fresh if v.ready]

    def _version_entry(self, name: str, number: int) -> tuple[ModelEntry, ModelConfig]:
        """A served model's folder as it is now, holding a loadable version `number`, and its
        config (4040 for an unknown model or a missing version folder, 4004 for a model that
        cannot load)."""
        folder = self._folder(name)
        if folder is None or name not in self._registry.models():
            raise NotFoundError(f"unknown model '{name}'")
        entry = scan_model(folder, name)
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
            await self._versions.load(entry, version)
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
            await self._versions.load(entry, version)
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
            # (no collection here, others serve: inferd.engine.resident.residency settles later)
            await self._versions.load(self._registry.entries[version.model], version)

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
