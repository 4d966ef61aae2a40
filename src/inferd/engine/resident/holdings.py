"""What residency (inferd.engine.resident.residency) decides over and acts on: `Holdings`, and
the engine's, from its parts: the registry's versions, the rollouts' policy (a model in a
rollout keeps its versions), the zero-shot models' bases (held by the models built over them),
and the loader's loads and evictions. Residency calls these; none of them calls residency."""

from __future__ import annotations

from typing import Protocol

from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.versions.loader import Loader
from inferd.engine.versions.registry import Registry
from inferd.engine.versions.version import Version


class Holdings(Protocol):
    """What residency decides over and acts on (the engine's registry, rollouts and loader)."""

    def versions(self) -> list[Version]:
        """Every registered version."""

    def in_rollout(self, model: str) -> bool: ...

    def pinned_anyway(self, version: Version) -> bool:
        """An `on_demand` version kept like a pinned one (a zero-shot model's base, which the
        zero-shot model holds)."""

    def disk_bytes(self, version: Version) -> int:
        """The size of a version's files, from which a version never loaded is budgeted
        (inferd.engine.resident.budget.UNMEASURED_FACTOR times it)."""

    async def load_resident(self, version: Version) -> None:
        """Loads a registered version in place (its footprint measured)."""

    async def evict(self, version: Version) -> None:
        """Drains and closes a version, leaving it registered and not resident."""


class EngineHoldings:
    def __init__(self, registry: Registry, policy: ServingPolicy, loader: Loader) -> None:
        self._registry = registry
        self._policy = policy
        self._loader = loader

    def versions(self) -> list[Version]:
        return list(self._registry.all_versions())

    def in_rollout(self, model: str) -> bool:
        return self._policy.in_rollout(model)

    def pinned_anyway(self, version: Version) -> bool:
        """Whether `version`'s model is a zero-shot model's base (which it holds)."""
        registry = self._registry
        return any(
            config.zero_shot is not None and config.zero_shot.base_model == version.model
            for name in registry.models()
            if (config := registry.config_of(name)) is not None
        )

    def disk_bytes(self, version: Version) -> int:
        return self._loader.disk_bytes(version)

    async def load_resident(self, version: Version) -> None:
        await self._loader.load_resident(version)

    async def evict(self, version: Version) -> None:
        await self._loader.evict(version)
