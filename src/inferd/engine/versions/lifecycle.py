"""The engine's life: at start, loading the repository and taking up saved rollouts, then the
background loops (judging rollouts, watching the repository for new versions); readiness, which
waits for both; and the end: an abort that answers everything at once, or a close."""

from __future__ import annotations

import asyncio

from inferd.config.server_settings import ServerSettings
from inferd.engine.requests.admission import Admission
from inferd.engine.resident.eviction import NOT_RESIDENT
from inferd.engine.resident.residency import Residency
from inferd.engine.rollout import Rollouts
from inferd.engine.versions.loader import Loader
from inferd.engine.versions.registry import Readiness, Registry
from inferd.engine.versions.version import VersionState


class Lifecycle:
    def __init__(
        self,
        settings: ServerSettings,
        registry: Registry,
        admission: Admission,
        residency: Residency,
        loader: Loader,
        rollouts: Rollouts,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._admission = admission
        self._residency = residency
        self._loader = loader
        self._rollouts = rollouts
        self._background: list[asyncio.Task[None]] = []
        self._resumed = False

    async def start(self) -> None:
        """Loads the repository, takes up saved rollouts, then judges rollouts and watches
        the repository for new versions of models that roll out by themselves."""
        rollouts = self._rollouts
        try:
            for version in self._registry.all_versions():  # (the loader loads the others)
                if version.config.needs_versions and self._residency.on_demand(version):
                    version.state, version.reason = VersionState.UNLOADED, NOT_RESIDENT
            await self._loader.load_all()
            await rollouts.resume()
        finally:
            self._resumed = True
        loop = asyncio.get_running_loop()
        self._background = [
            loop.create_task(rollouts.run(), name="inferd-rollouts"),
            loop.create_task(rollouts.watch(self._settings.repository_poll_s), name="inferd-watch"),
        ]

    def readiness(self, strict: bool) -> Readiness:
        """The registry's readiness (under `strict`: every model and version loaded), with
        each model whose rollout failed (its state file could not be taken up) in its
        per-model detail. A failed rollout never makes the server unready: its model serves
        by its version policy, and replicas that share the repository (and so the file)
        would all leave rotation at once; it is reported instead (the detail, the
        `inferd_rollout_failed` metric and its alert, the log, the status page)."""
        loaded = self._loader.done and self._resumed
        readiness = self._registry.readiness(
            strict, loaded, self._admission.draining, self._residency.never_fits
        )
        failures = self._rollouts.view.failures()
        if not failures:
            return readiness
        models = dict(readiness.models)
        for model, reason in failures.items():
            if model in models:
                models[model] = {**models[model], "rollout": {"status": "failed", "reason": reason}}
        return Readiness(readiness.ready, readiness.reason, models)

    async def abort(self) -> None:
        """Stops taking work and answers everything queued or running with 5030 at once (a
        forced shutdown, or a drain that ran out of time): no admitted request goes
        unanswered, none is cut off without a response."""
        self._admission.accepting = False
        self._residency.abort()
        for version in list(self._registry.all_versions()):
            await version.stop()

    async def close(self) -> None:
        self._admission.accepting = False
        self._residency.close()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._rollouts.close()
        for version in list(self._registry.all_versions()):
            await version.close()
