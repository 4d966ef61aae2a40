"""The engine: what every protocol front end (HTTP routes today) calls.

It composes the registry (which version answers), the loader (what serves), and admission (may
this request start, by when is it due, what a drain waits for), and runs each request on the
version's servable (through its response cache when it has one), with its parts: routing (the
version a request gets, written in its trace: inferd.engine.requests.routing), outcomes (the
version's statistics, a rollout's windows and shadow traffic: inferd.engine.requests.outcomes),
the early refusal (inferd.engine.requests.early_refusal) and its life (start, readiness, abort,
close: inferd.engine.versions.lifecycle). It never imports a web framework, and it does not
choose the runtime: the composition root passes a runtime loader in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

from inferd.clients import current_client
from inferd.config.server_settings import ServerSettings
from inferd.engine.kinds.text_generation import Generation
from inferd.engine.requests import cached
from inferd.engine.requests.admission import Admission
from inferd.engine.requests.cached import Answer
from inferd.engine.requests.early_refusal import refusal_before_reading
from inferd.engine.requests.generation_start import GenerationStart
from inferd.engine.requests.outcomes import Outcomes
from inferd.engine.requests.response_cache import ResponseCache
from inferd.engine.requests.routing import Routing
from inferd.engine.resident.holdings import EngineHoldings
from inferd.engine.resident.load_limits import LoadLimits
from inferd.engine.resident.residency import Residency
from inferd.engine.resident.residency_record import ResidencyFacts
from inferd.engine.rollout import Rollouts, ServingPolicy
from inferd.engine.versions.lifecycle import Lifecycle
from inferd.engine.versions.loader import Loader
from inferd.engine.versions.registry import Readiness, Registry
from inferd.engine.versions.version import Version
from inferd.engine.versions.version_loader import RuntimeLoader
from inferd.errors import InferdError
from inferd.generation.chat import Prompt
from inferd.generation.params import SamplingRequest
from inferd.observability.observer import Observer
from inferd.observability.trace import current_trace
from inferd.repository.scan import ModelEntry
from inferd.runtime.dispatch import InstanceLoad
from inferd.verbs.verb import Verb, VerbRequest

R = TypeVar("R", bound=VerbRequest)
A = TypeVar("A")


class Engine:
    def __init__(
        self,
        settings: ServerSettings,
        entries: Sequence[ModelEntry],
        runtime_loader: RuntimeLoader,
        observer: Observer | None = None,
        root: Path | None = None,
    ) -> None:
        self._settings = settings
        # which versions serve: the version policy, then the rollouts' records (one place)
        self.policy = ServingPolicy.for_repository(root)
        self.registry = Registry([self.policy.select(entry) for entry in entries])
        self.admission = Admission(settings)
        self.loader = Loader(
            self.registry,
            settings,
            runtime_loader,
            observer or Observer(),
            root,
            self.admission,
            self.policy.select,
        )
        self.residency = Residency(
            settings.model_memory_budget_mb,
            settings.max_loaded_versions,
            EngineHoldings(self.registry, self.policy, self.loader),
            settings.device_memory_budget_mb,
            LoadLimits(settings.client_loads_per_minute, settings.client_load_burst),
        )
        self.rollouts = Rollouts(self.registry, self.loader, observer or Observer(), self.policy)
        self._routing = Routing(self.registry, self.rollouts)
        self._outcomes = Outcomes(self.rollouts)
        self._starts = GenerationStart(
            self.admission, self._routing, self.residency, self._outcomes
        )
        self._life = Lifecycle(
            settings, self.registry, self.admission, self.residency, self.loader, self.rollouts
        )

    # -- inference --------------------------------------------------------------------------

    async def serve(
        self, verb: Verb[R, A], request: R, timeout_s: float | None = None
    ) -> tuple[Version, A]:
        """One request for any verb (inferd.verbs): admitted, given its version, run by its
        servable before its deadline, its outcome recorded; then, in a rollout, maybe mirrored
        to the candidate. Answered from the version's response cache when it has one: the key
        is the verb and its request's `arguments` (made only for a version with a cache)."""

        def answered(version: Version, deadline: float | None) -> Awaitable[A]:
            servable = version.servable
            if version.cache is None:
                return verb.answer(servable, request, deadline)
            return cached.answer(
                version.cache,
                servable,
                verb.name,
                verb.arguments(request),
                lambda: verb.answer(servable, request, deadline),
                deadline,
                version.cache_lookup,
                cached.partition_of(
                    current_client(), version.config.response_cache.shared_across_keys
                ),
            )

        async with self.admission.admit():
            served = Routing.named(
                self._routing.choose(request.model, verb.purpose, request.version)
            )
            deadline = self.admission.deadline_for(served.config, timeout_s)
            # the client's deadline when it sent one the server keeps (not cut by its cap)
            current_trace().deadline_by_client = (
                timeout_s is not None and timeout_s <= self._settings.max_request_timeout_s
            )
            with self._outcomes.recorded(served):
                async with self.residency.hold(served, deadline):
                    answer = await answered(served, deadline)
        self._outcomes.mirror(
            served,
            lambda v: answered(v, None),
            lambda shadow: verb.agree(served.config, answer, shadow),
        )
        return served, answer

    async def start_generation(
        self,
        model: str | None,
        prompt: Prompt,
        sampling: SamplingRequest,
        version: str | None = None,
    ) -> Generation:
        """Admits and queues a generation (inferd.engine.requests.generation_start). The handle
        holds an in-flight slot until its stream ends or it is closed."""
        (generation,) = await self._starts.start(model, prompt, sampling, version)
        return generation

    async def start_generations(
        self, model: str | None, prompt: Prompt, sampling: SamplingRequest, n: int
    ) -> list[Generation]:
        """`n` answers to one prompt, which share its prefill (all admitted, or none)."""
        return await self._starts.start(model, prompt, sampling, None, n)

    def refusal_before_reading(
        self,
        model: str | None,
        version: str | None = None,
        purpose: str | None = None,
        arriving: int = 0,
    ) -> InferdError | None:
        """What every request to `model` would be refused with now, whatever its body holds
        (inferd.engine.requests.early_refusal); None when the request must be read to know."""
        return refusal_before_reading(
            self.admission, self.registry, model, version, purpose, arriving
        )

    def route_key_field(self, model: str | None, purpose: str | None) -> str | None:
        """The request field that names the route key for `model` (naming none: the default
        model for `purpose`); None when none is configured or the model is not known yet."""
        return self._routing.route_key_field(model, purpose)

    async def resident(self, model: str, version: str | None) -> Version:
        """The version that answers, in memory (an on-demand one loaded now, within the
        server's request timeout): what a client's metadata request describes."""
        served = self.registry.resolve(model, version)
        deadline = self.admission.deadline_for(served.config, None)
        async with self.residency.hold(served, deadline):
            return served

    async def load_model(self, name: str) -> tuple[Version, list[Version]]:
        """An admin's load of a model (inferd.engine.versions.loader): the version that serves,
        and the on-demand versions evicted to make room for what it brought into memory."""
        served, fresh = await self.loader.load_model(name)
        evicted = []
        for version in fresh:
            evicted += await self.residency.loaded_by_admin(version)
        return served, evicted

    async def unload_model(self, name: str) -> None:
        """An admin's unload: every version of the model drained and closed."""
        await self.loader.unload_model(name)

    # -- life -------------------------------------------------------------------------------

    async def load_all(self) -> None:
        """Loads the repository, takes up saved rollouts, then judges rollouts and watches
        the repository for new versions of models that roll out by themselves."""
        await self._life.start()

    def readiness(self, strict: bool) -> Readiness:
        """The registry's readiness, with each model whose rollout failed (its state file
        could not be taken up) in its per-model detail; under `strict`, not ready then."""
        return self._life.readiness(strict)

    @property
    def in_flight(self) -> int:
        return self.admission.in_flight

    @property
    def accepting(self) -> bool:
        return self.admission.accepting

    def begin_drain(self) -> None:
        self.admission.begin_drain()

    async def drain(self, timeout_s: float) -> bool:
        return await self.admission.drain(timeout_s)

    async def abort(self) -> None:
        """Stops taking work and answers everything queued or running with 5030 at once (a
        forced shutdown, or a drain that ran out of time)."""
        self.admission.aborting = True
        await self._life.abort()

    @property
    def answered_cut(self) -> int:
        """Requests in flight that an abort answered 5030 (as their answers went out)."""
        return self.admission.cut

    async def close(self) -> None:
        await self._life.close()

    # -- what the metrics read at scrape time (observability's ServerView) -------------------

    def residency_facts(self) -> list[ResidencyFacts]:
        return self.residency.facts()

    def repository_index(self) -> list[dict[str, str]]:
        """Every model and version with its state, and the versions a rollout withdrew."""
        return self.registry.index(self.policy.withdrawn)

    def queue_depths(self) -> list[tuple[str, str, int]]:
        return self.registry.queue_depths()

    def model_states(self) -> list[tuple[str, str, bool, float | None]]:
        return self.registry.model_states()

    def kv_usages(self) -> list[tuple[str, str, int, int]]:
        return self.registry.kv_usages()

    def waiting_requests(self) -> int:
        return self.registry.waiting_requests()

    @property
    def max_loaded_versions(self) -> int:
        return self._settings.max_loaded_versions

    def rollout_failures(self) -> list[tuple[str, bool]]:
        """Each model, and whether its rollout failed (its state file could not be read)."""
        failed = self.rollouts.view.failures()
        return [(model, model in failed) for model in self.registry.models()]

    def instance_loads(self) -> list[tuple[str, str, InstanceLoad]]:
        return self.registry.instance_loads()

    def cache_states(self) -> list[tuple[str, str, ResponseCache[Answer]]]:
        return self.registry.cache_states()
