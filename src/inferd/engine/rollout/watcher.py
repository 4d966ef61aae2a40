"""The repository watcher: every `repository_poll_s`, for each model whose config asks for it
(`rollout.auto`), a version folder newer than the one serving starts a rollout. It asks the
serving policy: a withdrawn version (rolled back or aborted) is never started again by
itself, and each new folder is tried once (one that does not load is logged, not retried).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.versions.registry import Registry
from inferd.errors import NotFoundError
from inferd.repository.scan import scan_model

log = logging.getLogger(__name__)


class RepositoryWatcher:
    def __init__(
        self,
        registry: Registry,
        policy: ServingPolicy,
        start: Callable[[str, int], Awaitable[object]],
    ) -> None:
        """`start(model, version)`: begins a rollout (the controller's)."""
        self._registry = registry
        self._policy = policy
        self._start = start
        self._tried: dict[str, set[int]] = {}

    def newest(self, model: str) -> int:
        """The highest version folder with a model file that is not withdrawn (0: none);
        reads the folder."""
        entry = self._registry.entries.get(model)
        if entry is None:
            raise NotFoundError(f"unknown model '{model}'")
        withdrawn = set(self._policy.withdrawn(model))
        found = (v.version for v in scan_model(entry.folder).available)
        return max((n for n in found if n not in withdrawn), default=0)

    async def watch(self, every_s: float) -> None:
        """Checks every model every `every_s` (until cancelled); one model's fault is logged
        and never stops the watch."""
        while True:
            await asyncio.sleep(every_s)
            for model in self._registry.models():
                try:
                    await self.check(model)
                except Exception as exc:
                    log.error(
                        "automatic rollout not started",
                        extra={"model": model, "reason": getattr(exc, "message", str(exc))},
                    )

    async def check(self, model: str) -> None:
        config = self._registry.config_of(model)
        if config is None or not config.rollout.auto:
            return
        record = self._policy.record(model)
        if record is not None and record.active:
            return
        serving = self._registry.resolve(model)
        if not serving.ready:
            return
        newest = await asyncio.to_thread(self.newest, model)
        tried = self._tried.setdefault(model, set())
        if newest <= serving.version or newest in tried:
            return
        tried.add(newest)
        log.info(
            "new version folder: starting a rollout", extra={"model": model, "version": newest}
        )
        await self._start(model, newest)
