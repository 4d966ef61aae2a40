"""Every Prometheus metric of inferd, in a registry of its own: the one `Metrics` object a
server builds, also the observer of the data path that records them.

The metrics themselves are defined by concept beside this module: requests
(`request_metrics`), batches (`batch_metrics`), texts and drift (`text_metrics`), generation
(`generation_metrics`), rollouts (`rollout_metrics`), jobs (`job_metrics`), and what is read at
scrape time: the engine's state (`engine_metrics`), the memory limit (`memory_limit`) and the
GPUs (`gpu`).

Label values are bounded: a model label is only ever a model of the repository (a name a client
made up becomes `_unknown`; a request about no model, such as `/v2` or a probe, has it empty),
an endpoint label is a route template, never a raw path, and a predicted label is one of the
model's configured labels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from inferd.observability.batch_metrics import BatchMetrics
from inferd.observability.engine_metrics import EngineCollector, ServerView
from inferd.observability.gateway_metrics import GatewayCollector
from inferd.observability.generation_metrics import GenerationMetrics
from inferd.observability.gpu import GpuCollector
from inferd.observability.job_metrics import JobMetrics
from inferd.observability.memory_limit import MemoryLimitCollector
from inferd.observability.metric_bounds import NO_MODEL, UNKNOWN
from inferd.observability.observer import (
    BatchRan,
    Event,
    GenerationFinished,
    GenerationStep,
    GenerationTokens,
    JobEnded,
    JobsLost,
    JobsWaiting,
    MemoryPressure,
    Observer,
    RolloutDecided,
    Routed,
    ShadowOutcome,
    TextsServed,
)
from inferd.observability.request_metrics import RequestMetrics
from inferd.observability.rollout_metrics import RolloutMetrics
from inferd.observability.text_metrics import TextMetrics


class Metrics(Observer):
    """Prometheus metrics for one server; also an observer of the data path (batches, texts,
    generation steps). Drift is observed apart (`DriftObserver`) and reported here."""

    def __init__(
        self,
        known_models: Sequence[str],
        labels_by_model: dict[str, Sequence[str]] | None = None,
        # models absent here have labels bounded by their output size: all are allowed
        gpu: bool = True,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._known = set(known_models)
        self._view: ServerView | None = None
        r = self.registry
        self._requests = RequestMetrics(r, self.model_label)
        self._batches = BatchMetrics(r, self.model_label)
        self._texts = TextMetrics(r, self.model_label, labels_by_model or {})
        self._generation = GenerationMetrics(r, self.model_label)
        self._rollouts = RolloutMetrics(r, self.model_label)
        self._jobs = JobMetrics(r)
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            BatchRan: self._batches.on_batch,
            MemoryPressure: self._batches.on_memory_pressure,
            TextsServed: self._texts.on_texts,
            GenerationStep: self._generation.on_generation_step,
            GenerationTokens: self._generation.on_generation_tokens,
            GenerationFinished: self._generation.on_generation_finished,
            RolloutDecided: self._rollouts.on_rollout,
            ShadowOutcome: self._rollouts.on_shadow,
            Routed: self._rollouts.on_routed,
            JobEnded: self._jobs.on_job,
            JobsWaiting: self._jobs.on_jobs_waiting,
            JobsLost: self._jobs.on_jobs_lost,
        }
        """The part that records each kind of event the data path reports."""
        ProcessCollector(registry=r)  # process_resident_memory_bytes and friends
        r.register(MemoryLimitCollector())
        r.register(EngineCollector(lambda: self._view))
        r.register(GatewayCollector(lambda: self._view))  # the inference gateway's gauges
        self.gpu_present = False
        if gpu:
            collector = GpuCollector()
            self.gpu_present = collector.present
            r.register(collector)

    def attach(self, view: ServerView) -> None:
        self._view = view

    def model_label(self, model: str | None) -> str:
        """A model of the repository; "" for a request about no model (server metadata,
        probes); `_unknown` for a name that is not one of ours."""
        if model is None:
            return NO_MODEL
        return model if model in self._known else UNKNOWN

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- from the HTTP layer ---------------------------------------------------------------

    def on_request(
        self,
        endpoint: str,
        model: str | None,
        status: int,
        code: int | None,
        total_s: float,
        outcome: str | None = None,
    ) -> None:
        self._requests.on_request(endpoint, model, status, code, total_s, outcome)

    def on_grpc_refused(self, reason: str) -> None:
        self._requests.on_grpc_refused(reason)

    def on_paced(self, endpoint: str) -> None:
        self._requests.on_paced(endpoint)

    def on_stages(self, model: str, version: str, stages: dict[str, float]) -> None:
        self._requests.on_stages(model, version, stages)

    # -- from the data path ----------------------------------------------------------------

    def observe(self, event: Event) -> None:
        handle = self._handlers.get(type(event))
        if handle is not None:
            handle(event)

    def on_drift(self, model: str, feature: str, psi: float) -> None:
        self._texts.on_drift(model, feature, psi)
