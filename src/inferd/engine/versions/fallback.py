"""Falling back at start-up: with a `latest` policy and none of the selected versions of a model
serving, the newest older version that loads serves instead (inferd.engine.versions.loader)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from inferd.engine.versions.registry import Registry
from inferd.engine.versions.version import Version, VersionState
from inferd.repository.scan import ModelEntry

log = logging.getLogger(__name__)

Load = Callable[[ModelEntry, Version], Awaitable[None]]
"""Loads one version of an entry (never raises: a failure is the version's state)."""


async def fall_back(registry: Registry, load: Load, name: str) -> bool:
    """With a `latest` policy and no selected version serving, the newest older version
    that loads serves instead: a broken new version never takes the model down."""
    entry = registry.entries[name]
    config = entry.config
    versions = registry.versions_map(name)
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
        await load(entry, version)
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
