"""The engine: what every protocol front end (HTTP routes today) calls.

It composes the registry (which version answers), the loader (what serves), and admission (may
this request start, by when is it due, what a drain waits for), and runs each request on the
version's servable, recording its outcome in the version's statistics and its model and version
in the request's trace. It never imports a web framework, and it does not choose the runtime:
the composition root (the CLI) passes a runtime loader in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from inferd.config.server import ServerSettings
from inferd.engine import agreement, cached
from inferd.engine.admission import Admission
from inferd.engine.cached import Answer
from inferd.engine.generation import Generation
from inferd.engine.loader import Loader, RuntimeLoader
from inferd.engine.registry import Readiness, Registry
from inferd.engine.residency import Residency, ResidencyFacts
from inferd.engine.response_cache import ResponseCache
from inferd.engine.rollout import Rollouts, ServingPolicy
from inferd.engine.servable import Classified, Embeddings, Reranked, Servable
from inferd.engine.version import Version
from inferd.errors import ErrorCode, InferdError, QueueFullError
from inferd.generation.chat import Messages
from inferd.generation.params import SamplingRequest
from inferd.generation.sequence import Sequence as Seq
from inferd.observability.observer import Observer
from inferd.observability.trace import current_trace
from inferd.repository.scan import ModelEntry
from inferd.runtime.dispatch import InstanceLoad
from inferd.runtime.protocol import Array, Feeds

T = TypeVar("T")


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
        self.residency = Residency(
            settings.model_memory_budget_mb,
            settings.max_loaded_versions,
            lambda version: self.loader.load_resident(version),
            lambda version: self.loader.evict(version),
            lambda: list(self.registry.all_versions()),
            self._in_rollout,
            self._zero_shot_base,
            lambda version: self.loader.disk_bytes(version),
        )
        self.loader = Loader(
            self.registry,
            settings,
            runtime_loader,
            observer or Observer(),
            root,
            lambda: self.admission.draining,
            lambda: self.admission.in_flight,
            self.policy.select,
            self.residency.on_demand,
        )
        self.rollouts = Rollouts(self.registry, self.loader, observer or Observer(), self.policy)
        self._background: list[asyncio.Task[None]] = []
        self._resumed = False

    # -- inference --------------------------------------------------------------------------

    async def infer(
        self,
        model: str,
        version: str | None,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        timeout_s: float | None = None,
    ) -> tuple[Version, dict[str, Array]]:
        rows = self._settings.max_request_rows
        return await self._serve(
            "infer",
            (feeds, list(output_names or ())),
            lambda: self._resolve(model, version),
            timeout_s,
            lambda servable, deadline: servable.infer(feeds, output_names, deadline, rows),
            lambda served, a, b: agreement.tensors(a, b, served.config.rollout.tensor_tolerance),
        )

    async def embed(
        self,
        model: str | None,
        texts: Sequence[str],
        dimensions: int | None = None,
        timeout_s: float | None = None,
        version: str | None = None,
    ) -> tuple[Version, Embeddings]:
        return await self._serve(
            "embed",
            (list(texts), dimensions),
            lambda: self._task_model(model, "embed", version),
            timeout_s,
            lambda servable, deadline: servable.embed(texts, deadline, dimensions),
            lambda served, a, b: agreement.embeddings(a, b),
        )

    async def classify(
        self,
        model: str | None,
        texts: Sequence[str],
        k: int = 1,
        timeout_s: float | None = None,
        version: str | None = None,
    ) -> tuple[Version, Classified]:
        return await self._serve(
            "classify",
            (list(texts), k),
            lambda: self._task_model(model, "predict", version),
            timeout_s,
            lambda servable, deadline: servable.classify(texts, k, deadline),
            lambda served, a, b: agreement.labels(a, b),
        )

    async def rerank(
        self,
        model: str | None,
        query: str,
        texts: Sequence[str],
        raw_scores: bool = False,
        timeout_s: float | None = None,
        version: str | None = None,
    ) -> tuple[Version, Reranked]:
        return await self._serve(
            "rerank",
            (query, list(texts), raw_scores),
            lambda: self._task_model(model, "rerank", version),
            timeout_s,
            lambda servable, deadline: servable.rerank(query, texts, raw_scores, deadline),
            lambda served, a, b: agreement.rankings(a, b),
        )

    async def _serve(
        self,
        verb: str,
        arguments: Sequence[cached.Argument],
        choose: Callable[[], Version],
        timeout_s: float | None,
        run: Callable[[Servable, float | None], Awaitable[T]],
        agree: Callable[[Version, T, T], float],
    ) -> tuple[Version, T]:
        """One request: admitted, given its version, run by its servable before its deadline,
        its outcome recorded; then, in a rollout, maybe mirrored to the candidate. Answered
        from the version's response cache when it has one, whatever the verb: the key is the
        verb and its `arguments` (everything `run` passes the servable but the deadline)."""

        def answered(version: Version, deadline: float | None) -> Awaitable[T]:
            servable = version.servable
            if version.cache is None:
                return run(servable, deadline)
            return cached.answer(
                version.cache,
                servable,
                verb,
                arguments,
                lambda: run(servable, deadline),
                deadline,
                version.cache_lookup,
            )

        async with self.admission.admit():
            served = self._named(choose())
            deadline = self.admission.deadline_for(served.config, timeout_s)
            with self._outcome(served):
                async with self.residency.hold(served, deadline):
                    answer = await answered(served, deadline)
        self._mirror(
            served, lambda v: answered(v, None), lambda shadow: agree(served, answer, shadow)
        )
        return served, answer

    async def start_generation(
        self,
        model: str | None,
        prompt: str | Messages,
        sampling: SamplingRequest,
        version: str | None = None,
    ) -> Generation:
        """Admits and queues a generation (of a prompt, or of chat messages, which the
        model's chat template renders). The returned handle holds an in-flight slot (what a
        drain waits for) until its stream ends or it is closed; then its outcome counts in a
        rollout, and a greedy one may be mirrored to the candidate."""
        self.admission.enter()
        try:
            served = self._named(self._task_model(model, "generate", version))
        except BaseException:
            self.admission.leave()
            raise
        try:
            with self._outcome(served, finished_only=True):
                async with self.residency.hold(served, None):
                    seq = await served.servable.generate(prompt, sampling)
                    self.residency.enter(served)  # (held until its stream ends)
        except BaseException:
            self.admission.leave()
            raise
        route = current_trace().route
        return Generation(
            seq,
            served.model,
            served.version,
            lambda: self._generation_ended(served, seq, route, prompt, sampling),
        )

    def _generation_ended(
        self,
        served: Version,
        seq: Seq,
        route: str | None,
        prompt: str | Messages,
        sampling: SamplingRequest,
    ) -> None:
        """Releases the generation's slot; a finished one counts in a rollout (its latency
        is the time per generated token, its queue time the time to the first token: a
        generation's length is the prompt's, not the version's doing), and a greedy one
        routed to the stable version may run again on the candidate, its tokens compared."""
        self.admission.leave()
        self.residency.leave(served)
        finished = seq.finished
        if finished is None or finished.reason == "cancelled":
            return  # its client left: neither version's failure
        failed = finished.reason == "error"
        per_token = finished.total_s / max(finished.completion_tokens, 1)
        first = finished.first_token_s or 0.0
        self.rollouts.record(served.model, served.version, failed, per_token, first, route)
        if route != "stable" or failed or not seq.params.greedy:
            return
        candidate = self.rollouts.shadow_target(served.model)
        if candidate is None:
            return
        stable_tokens = list(seq.generated)

        async def shadow() -> list[int]:
            mirrored = await candidate.servable.generate(prompt, sampling)
            await mirrored.result()
            return list(mirrored.generated)

        self.rollouts.mirror(
            served.model, shadow(), lambda tokens: agreement.tokens(stable_tokens, tokens)
        )

    def refusal_before_reading(
        self,
        model: str | None,
        version: str | None = None,
        purpose: str | None = None,
        arriving: int = 0,
    ) -> InferdError | None:
        """What every request to `model` (or, naming none yet, to any model serving
        `purpose`) would be refused with now, whatever its body holds: the admission's
        refusal, or 4290 when each version it could reach has a full queue, or when
        `arriving` (the requests to these models read and not yet answered) fill what they
        all hold, or when each would queue it longer than its `max_queue_time_ms`. None
        when the request must be read to know (an unknown or unready model gets its answer
        there)."""
        refused = self.admission.refusal()
        if refused is not None:
            return refused
        names = [model] if model is not None else self.registry.models_for(purpose or "")
        if not names:
            return None
        holders: dict[int, Servable] = {}
        for name in names:
            try:
                target = self.registry.resolve(name, version)
            except InferdError:
                return None
            if not target.ready:
                return None
            holder = target.servable.holder  # (zero-shot models share their base's queue)
            holders[id(holder)] = holder
        capacities = [h.capacity for h in holders.values()]
        room = None if None in capacities else sum(c or 0 for c in capacities)
        if all(h.saturated for h in holders.values()) or (room is not None and arriving >= room):
            whose = f"model '{model}'" if model is not None else f"every model that can {purpose}"
            return QueueFullError(f"the queue of {whose} is full; retry later", retry_after_s=1.0)
        # too much queued work for the queue-time bound: refused only when every queue it
        # could reach says so (the arriving ones spread over them), the one that frees first
        share = arriving // len(holders)
        overdue = [h.queue_time_refusal(share) for h in holders.values()]
        refusals = [o for o in overdue if o is not None]
        if len(refusals) == len(overdue):
            return min(refusals, key=lambda o: o.retry_after_s or 0.0)
        return None

    def route_key_field(self, model: str | None, purpose: str | None) -> str | None:
        """The request field that names the route key for `model` (naming none: the default
        model for `purpose`); None when none is configured or the model is not known yet
        (its request gets that answer when it runs)."""
        if not model:
            try:
                model = self.registry.default_for(purpose or "").model
            except InferdError:
                return None
        config = self.registry.config_of(model)
        return config.rollout.route_key_field if config is not None else None

    async def resident(self, model: str, version: str | None) -> Version:
        """The version that answers, in memory (an on-demand one loaded now, within the
        server's request timeout): what a client's metadata request describes."""
        served = self.registry.resolve(model, version)
        deadline = self.admission.deadline_for(served.config, None)
        async with self.residency.hold(served, deadline):
            return served

    def _in_rollout(self, model: str) -> bool:
        record = self.policy.record(model)
        return record is not None and record.active

    def _zero_shot_base(self, version: Version) -> bool:
        """Whether `version`'s model is a zero-shot model's base (which it holds)."""
        return any(
            config.zero_shot is not None and config.zero_shot.base_model == version.model
            for name in self.registry.models()
            if (config := self.registry.config_of(name)) is not None
        )

    def _task_model(self, model: str | None, purpose: str, version: str | None = None) -> Version:
        if not model:
            model = self.registry.default_for(purpose).model
        return self._resolve(model, version)

    def _resolve(self, model: str, version: str | None) -> Version:
        """The version named, else the rollout's choice for this request, else the highest
        ready one."""
        if version is None:
            trace = current_trace()
            routed = self.rollouts.choose(model, trace.route_key)
            if routed is not None:
                number, trace.route = routed
                if trace.route == "baseline":
                    baseline = self.rollouts.baseline(model)
                    if baseline is not None:
                        return baseline
                    trace.route = "stable"  # (closed since it was chosen)
                return self.registry.resolve(model, str(number))
        return self.registry.resolve(model, version)

    @staticmethod
    def _named(served: Version) -> Version:
        trace = current_trace()
        trace.model, trace.version = served.model, str(served.version)
        return served

    def _mirror(
        self,
        served: Version,
        run: Callable[[Version], Awaitable[T]],
        agree: Callable[[T], float],
    ) -> None:
        """For a request a rollout routed to its stable version, maybe the same request on
        the candidate, in the background, compared (inferd.engine.rollout: shadow traffic)."""
        if current_trace().route != "stable":
            return
        candidate = self.rollouts.shadow_target(served.model)
        if candidate is not None:
            self.rollouts.mirror(served.model, run(candidate), agree)

    @contextmanager
    def _outcome(self, served: Version, finished_only: bool = False) -> Iterator[None]:
        """Records the request's outcome and duration in the version's statistics, and for
        a rollout: every error but shedding (4290) counts as a failure there (the versions of
        a rollout share their clients, so a client's mistakes fall on both alike, while an
        input one version runs and the other refuses is the candidate's fault).
        `finished_only`: what runs inside is only a request's start (a generation's): only
        a failure is recorded for the rollout, and nothing in the statistics."""
        started = time.perf_counter()
        ok = failed = False
        try:
            yield
            ok = True
        except InferdError as exc:
            failed = exc.code is not ErrorCode.QUEUE_FULL
            raise
        except Exception:
            failed = True
            raise
        finally:
            seconds = time.perf_counter() - started
            if not finished_only:
                served.stats.on_request(ok, seconds)
            if failed or not finished_only:
                trace = current_trace()
                # the version's own time: its queue wait is judged apart (it grows with the
                # share of traffic a version takes, not with what the version does)
                own = max(seconds - trace.queue_s, 0.0)
                self.rollouts.record(
                    served.model, served.version, failed, own, trace.queue_s, trace.route
                )

    # -- life -------------------------------------------------------------------------------

    async def load_all(self) -> None:
        """Loads the repository, takes up saved rollouts, then judges rollouts and watches
        the repository for new versions of models that roll out by themselves."""
        try:
            await self.loader.load_all()
            await self.rollouts.resume()
        finally:
            self._resumed = True
        loop = asyncio.get_running_loop()
        self._background = [
            loop.create_task(self.rollouts.run(), name="inferd-rollouts"),
            loop.create_task(
                self.rollouts.watch(self._settings.repository_poll_s), name="inferd-watch"
            ),
        ]

    def readiness(self, strict: bool) -> Readiness:
        """The registry's readiness, with each model whose rollout failed (its state file
        could not be taken up) in its per-model detail; under `strict`, not ready then."""
        loaded = self.loader.done and self._resumed
        readiness = self.registry.readiness(strict, loaded, self.admission.draining)
        failures = self.rollouts.failures()
        if not failures:
            return readiness
        models = dict(readiness.models)
        for model, reason in failures.items():
            if model in models:
                models[model] = {**models[model], "rollout": {"status": "failed", "reason": reason}}
        if strict and readiness.ready:
            problems = "; ".join(f"model '{m}': {r}" for m, r in sorted(failures.items()))
            return Readiness(False, problems, models)
        return Readiness(readiness.ready, readiness.reason, models)

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
        forced shutdown, or a drain that ran out of time): no admitted request goes
        unanswered, none is cut off without a response."""
        self.admission.accepting = False
        for version in list(self.registry.all_versions()):
            await version.stop()

    async def close(self) -> None:
        self.admission.accepting = False
        self.residency.close()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.rollouts.close()
        for version in list(self.registry.all_versions()):
            await version.close()

    # -- what the metrics read at scrape time (observability's ServerView) -------------------

    def residency_facts(self) -> list[ResidencyFacts]:
        return self.residency.facts()

    def queue_depths(self) -> list[tuple[str, str, int]]:
        return self.registry.queue_depths()

    def model_states(self) -> list[tuple[str, str, bool, float | None]]:
        return self.registry.model_states()

    def instance_loads(self) -> list[tuple[str, str, InstanceLoad]]:
        return self.registry.instance_loads()

    def cache_states(self) -> list[tuple[str, str, ResponseCache[Answer]]]:
        return self.registry.cache_states()
