"""Every Prometheus metric of inferd, defined in this one module, in a registry of its own.

Label values are bounded: a model label is only ever a model of the repository (a name a client
made up becomes `_unknown`; a request about no model, such as `/v2` or a probe, has it empty),
an endpoint label is a route template, never a raw path, and a predicted label is one of the
model's configured labels.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.observability.gpu import GpuCollector
from inferd.observability.observer import Observer
from inferd.observability.stats import BatchFacts

log = logging.getLogger(__name__)

SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LENGTH_BUCKETS = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
CONFIDENCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
UNKNOWN = "_unknown"
NO_MODEL = ""
STAGES = ("queue", "preprocess", "inference", "postprocess")


class InstanceFacts(Protocol):
    """What the metrics read of one runtime instance (the engine's dispatch keeps them)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def batches(self) -> int: ...
    @property
    def failures(self) -> int: ...
    @property
    def busy_s(self) -> float: ...
    @property
    def queued_batches(self) -> int: ...
    @property
    def seconds_per_element(self) -> float | None: ...


class CacheFacts(Protocol):
    """A version's response cache, as the metrics read it."""

    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def coalesced(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def expirations(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def entries(self) -> int: ...


class ResidencyFacts(Protocol):
    """A version's residency (inferd.engine.residency), as the metrics read it."""

    @property
    def model(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def on_demand(self) -> bool: ...
    @property
    def resident(self) -> bool: ...
    @property
    def footprint_bytes(self) -> int | None: ...
    @property
    def loads(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def cold_waits(self) -> int: ...
    @property
    def cold_wait_s(self) -> float: ...


class ServerView(Protocol):
    """What the metrics read from the engine at scrape time."""

    def queue_depths(self) -> Iterable[tuple[str, str, int]]: ...
    def model_states(self) -> Iterable[tuple[str, str, bool, float | None]]: ...
    def instance_loads(self) -> Iterable[tuple[str, str, InstanceFacts]]: ...
    def cache_states(self) -> Iterable[tuple[str, str, CacheFacts]]: ...
    def residency_facts(self) -> Iterable[ResidencyFacts]: ...
    @property
    def in_flight(self) -> int: ...


class _EngineCollector(Collector):
    def __init__(self, view: Callable[[], ServerView | None]) -> None:
        self._view = view

    def collect(self) -> Iterable[Metric]:
        view = self._view()
        if view is None:
            return
        depth = GaugeMetricFamily(
            "inferd_queue_depth", "Items waiting in a version's queue", labels=["model", "version"]
        )
        for model, version, items in view.queue_depths():
            depth.add_metric([model, version], items)
        yield depth
        ready = GaugeMetricFamily(
            "inferd_model_ready", "1 when the version serves", labels=["model", "version"]
        )
        load = GaugeMetricFamily(
            "inferd_model_load_seconds", "Time to load and warm up", labels=["model", "version"]
        )
        for model, version, is_ready, load_s in view.model_states():
            ready.add_metric([model, version], 1.0 if is_ready else 0.0)
            if load_s is not None:
                load.add_metric([model, version], load_s)
        yield ready
        yield load
        flight = GaugeMetricFamily("inferd_in_flight_requests", "Admitted, unanswered requests")
        flight.add_metric([], view.in_flight)
        yield flight
        yield from _instance_metrics(view.instance_loads())
        yield from _cache_metrics(view.cache_states())
        yield from _residency_metrics(view.residency_facts())


def _residency_metrics(facts: Iterable[ResidencyFacts]) -> Iterable[Metric]:
    """Per version: whether it is in memory, what its load added, its on-demand loads and
    evictions, and the time requests waited for those loads."""
    labels = ["model", "version", "residency"]
    resident = GaugeMetricFamily(
        "inferd_model_resident", "1 when the version is in memory", labels=labels
    )
    footprint = GaugeMetricFamily(
        "inferd_model_resident_bytes",
        "What the version's last load added to the process's resident memory",
        labels=labels,
    )
    loads = CounterMetricFamily(
        "inferd_model_loads_on_demand", "Loads of the version by a request", labels=labels
    )
    evictions = CounterMetricFamily(
        "inferd_model_evictions", "Evictions of the version to stay within budget", labels=labels
    )
    waits = CounterMetricFamily(
        "inferd_model_cold_waits", "Requests that waited for the version's load", labels=labels
    )
    waited = CounterMetricFamily(
        "inferd_model_cold_wait_seconds", "Time requests waited for its loads", labels=labels
    )
    for fact in facts:
        key = [fact.model, fact.version, "on_demand" if fact.on_demand else "pinned"]
        resident.add_metric(key, 1.0 if fact.resident else 0.0)
        if fact.footprint_bytes is not None:
            footprint.add_metric(key, fact.footprint_bytes)
        loads.add_metric(key, fact.loads)
        evictions.add_metric(key, fact.evictions)
        waits.add_metric(key, fact.cold_waits)
        waited.add_metric(key, fact.cold_wait_s)
    yield from (resident, footprint, loads, evictions, waits, waited)


def _cache_metrics(caches: Iterable[tuple[str, str, CacheFacts]]) -> Iterable[Metric]:
    """Per version with a response cache: how its lookups were answered, what it dropped, what
    it holds."""
    labels = ["model", "version"]
    lookups = CounterMetricFamily(
        "inferd_cache_lookups",
        "Response cache lookups by outcome: hit, miss (the request ran), coalesced (it waited "
        "for an identical request running)",
        labels=[*labels, "outcome"],
    )
    evictions = CounterMetricFamily(
        "inferd_cache_evictions", "Answers dropped to stay within max_mb", labels=labels
    )
    expirations = CounterMetricFamily(
        "inferd_cache_expirations", "Answers dropped after ttl_s", labels=labels
    )
    held = GaugeMetricFamily("inferd_cache_bytes", "Bytes of answers held", labels=labels)
    entries = GaugeMetricFamily("inferd_cache_entries", "Answers held", labels=labels)
    for model, version, cache in caches:
        key = [model, version]
        lookups.add_metric([*key, "hit"], cache.hits)
        lookups.add_metric([*key, "miss"], cache.misses)
        lookups.add_metric([*key, "coalesced"], cache.coalesced)
        evictions.add_metric(key, cache.evictions)
        expirations.add_metric(key, cache.expirations)
        held.add_metric(key, cache.bytes)
        entries.add_metric(key, cache.entries)
    yield from (lookups, evictions, expirations, held, entries)


def _instance_metrics(loads: Iterable[tuple[str, str, InstanceFacts]]) -> Iterable[Metric]:
    """Per runtime instance: what it ran, how busy it was, what waits for it, its speed."""
    labels = ["model", "version", "instance", "kind"]
    batches = CounterMetricFamily(
        "inferd_instance_batches", "Batches an instance ran", labels=labels
    )
    failures = CounterMetricFamily(
        "inferd_instance_failures", "Batches that failed on an instance", labels=labels
    )
    busy = CounterMetricFamily(
        "inferd_instance_busy_seconds", "Time an instance spent running batches", labels=labels
    )
    queued = GaugeMetricFamily(
        "inferd_instance_queued_batches",
        "Batches given to an instance and not finished (the running one included)",
        labels=labels,
    )
    speed = GaugeMetricFamily(
        "inferd_instance_seconds_per_element",
        "An instance's learned speed (seconds per input element) that dispatch compares",
        labels=labels,
    )
    for model, version, load in loads:
        key = [model, version, load.name, load.kind]
        batches.add_metric(key, load.batches)
        failures.add_metric(key, load.failures)
        busy.add_metric(key, load.busy_s)
        queued.add_metric(key, load.queued_batches)
        if load.seconds_per_element is not None:
            speed.add_metric(key, load.seconds_per_element)
    yield from (batches, failures, busy, queued, speed)


def memory_limit_bytes() -> float:
    """The cgroup memory limit of this process (v2, then v1), or the machine's memory."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return float(text)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


class _MemoryLimitCollector(Collector):
    def __init__(self) -> None:
        self._limit = memory_limit_bytes()

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "inferd_memory_limit_bytes", "Memory this process may use (cgroup limit, else RAM)"
        )
        gauge.add_metric([], self._limit)
        yield gauge


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
        self._labels = {m: set(v) for m, v in (labels_by_model or {}).items()}
        self._view: ServerView | None = None
        self._request_children: dict[tuple[object, ...], tuple[Any, Any]] = {}
        self._stage_children: dict[tuple[str, str], dict[str, Any]] = {}
        r = self.registry
        self.requests = Counter(
            "inferd_requests",
            "Requests by endpoint, model, HTTP status and error code",
            ["endpoint", "model", "status", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "inferd_request_duration_seconds",
            "Total time of a request in the server",
            ["endpoint", "model"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.stage = Histogram(
            "inferd_stage_duration_seconds",
            "Time per stage of a request",
            ["model", "version", "stage"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.batch_rows = Histogram(
            "inferd_batch_size",
            "Rows in a batch run",
            ["model", "version"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.batch_items = Histogram(
            "inferd_batch_items",
            "Queued items (requests or texts) in a batch run",
            ["model", "version"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "inferd_padded_elements",
            "Elements of padded inputs (tokens for text) run, by kind: "
            "real or padded; real/padded is the padding efficiency",
            ["model", "version", "kind"],
            registry=r,
        )
        self.oom_events = Counter(
            "inferd_out_of_memory_events",
            "Batches that ran out of memory",
            ["model", "version"],
            registry=r,
        )
        self.batch_limit = Gauge(
            "inferd_batch_size_limit",
            "Batch size limit now (lowered after out-of-memory)",
            ["model", "version"],
            registry=r,
        )
        self.input_length = Histogram(
            "inferd_input_length_tokens",
            "Tokens per text",
            ["model"],
            buckets=LENGTH_BUCKETS,
            registry=r,
        )
        self.confidence = Histogram(
            "inferd_top_confidence",
            "Score of the top label per text",
            ["model"],
            buckets=CONFIDENCE_BUCKETS,
            registry=r,
        )
        self.predicted = Counter(
            "inferd_predicted_labels", "Top labels predicted", ["model", "label"], registry=r
        )
        self.drift_psi = Gauge(
            "inferd_drift_psi",
            "Population stability index, recent window against reference",
            ["model", "feature"],
            registry=r,
        )
        self.first_token = Histogram(
            "inferd_generation_time_to_first_token_seconds",
            "From a generation's arrival to its first token (queue and prefill)",
            ["model"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "inferd_generation_inter_token_seconds",
            "Between a sequence's consecutive tokens",
            ["model"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.generated = Counter(
            "inferd_generation_tokens",
            "Tokens by kind: prompt (prefilled) or completion "
            "(generated); rate() of completion is tokens per second",
            ["model", "kind"],
            registry=r,
        )
        self.generation_finished = Counter(
            "inferd_generation_finished",
            "Generations by finish reason",
            ["model", "reason"],
            registry=r,
        )
        self.generation_step = Histogram(
            "inferd_generation_step_seconds",
            "One prefill or decode step of the batch",
            ["model", "kind"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.generation_rows = Histogram(
            "inferd_generation_step_rows",
            "Sequences in one prefill or decode step",
            ["model", "kind"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.sequences = Gauge(
            "inferd_generation_sequences",
            "Sequences running (in the batch) or waiting",
            ["model", "version", "state"],
            registry=r,
        )
        self.kv_tokens = Gauge(
            "inferd_generation_kv_cache_tokens",
            "Token slots the KV cache holds, padding included",
            ["model", "version"],
            registry=r,
        )
        self.kv_limit = Gauge(
            "inferd_generation_kv_cache_limit_tokens",
            "The KV cache budget (max_kv_tokens)",
            ["model", "version"],
            registry=r,
        )
        self.rollout_weight = Gauge(
            "inferd_rollout_canary_weight",
            "The rollout candidate's share of requests naming no version (0 to 1)",
            ["model"],
            registry=r,
        )
        self.jobs = Counter(
            "inferd_jobs",
            "Job runs by outcome: succeeded, failed (its route answered an error), requeued "
            "(its route was shedding or draining)",
            ["outcome"],
            registry=r,
        )
        self.job_duration = Histogram(
            "inferd_job_duration_seconds",
            "Time a job ran in a worker",
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.jobs_waiting = Gauge(
            "inferd_jobs_queued",
            "Jobs waiting or running in the job queue (all processes sharing it)",
            registry=r,
        )
        self.jobs_lost = Counter(
            "inferd_jobs_lost",
            "Jobs the job store lost (Redis came back without its data): those it held, waiting, "
            "running or answered, when last read; counted by the process that found the loss",
            registry=r,
        )
        self.rollout_decisions = Counter(
            "inferd_rollout_decisions",
            "Rollout decisions: start, advance, hold, promote, rollback, abort",
            ["model", "decision"],
            registry=r,
        )
        self.shadowed = Counter(
            "inferd_rollout_shadow_requests",
            "Requests mirrored to a rollout's candidate: compared, failed (on the candidate), shed",
            ["model", "outcome"],
            registry=r,
        )
        self.agreement = Gauge(
            "inferd_rollout_agreement",
            "Mean agreement of the candidate's shadowed answers with the stable version's, this "
            "window (0 to 1)",
            ["model"],
            registry=r,
        )
        self.routed = Counter(
            "inferd_rollout_requests",
            "Requests of a model in a rollout, by version, route (stable, canary) and outcome",
            ["model", "version", "route", "outcome"],
            registry=r,
        )
        self.grpc_refused = Counter(
            "inferd_grpc_refused",
            "gRPC calls refused before their message was read, by reason (calls: over "
            "grpc_max_calls)",
            ["reason"],
            registry=r,
        )
        ProcessCollector(registry=r)  # process_resident_memory_bytes and friends
        r.register(_MemoryLimitCollector())
        r.register(_EngineCollector(lambda: self._view))
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
        self, endpoint: str, model: str | None, status: int, code: int | None, total_s: float
    ) -> None:
        label = self.model_label(model)  # bounded, so the cache below is bounded too
        key = (endpoint, label, status, code)
        children = self._request_children.get(key)
        if children is None:  # label lookups cost more than the observations: done once
            children = (
                self.requests.labels(endpoint, label, str(status), str(code or 0)),
                self.latency.labels(endpoint, label),
            )
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(total_s)

    def on_grpc_refused(self, reason: str) -> None:
        self.grpc_refused.labels(reason).inc()

    def on_stages(self, model: str, version: str, stages: dict[str, float]) -> None:
        label = self.model_label(model)
        key = (label, version)
        children = self._stage_children.get(key)
        if children is None:
            children = {stage: self.stage.labels(label, version, stage) for stage in STAGES}
            self._stage_children[key] = children
        for stage, seconds in stages.items():
            children[stage].observe(seconds)

    # -- from the engine -----------------------------------------------------------------

    def on_batch(self, model: str, version: str, record: BatchFacts) -> None:
        label = self.model_label(model)
        self.batch_rows.labels(label, version).observe(record.rows)
        self.batch_items.labels(label, version).observe(record.items)
        if record.padded_elements:
            self.tokens.labels(label, version, "real").inc(record.real_elements)
            self.tokens.labels(label, version, "padded").inc(record.padded_elements)

    def on_memory_pressure(self, model: str, version: str, rows: int, limit: int) -> None:
        label = self.model_label(model)
        self.oom_events.labels(label, version).inc()
        self.batch_limit.labels(label, version).set(limit)

    def on_generation_step(
        self,
        model: str,
        version: str,
        kind: str,
        rows: int,
        seconds: Sequence[float],
        running: int,
        waiting: int,
        kv_tokens: int,
        kv_limit: int,
    ) -> None:
        label = self.model_label(model)
        if seconds:
            step = self.generation_step.labels(label, kind)
            in_step = self.generation_rows.labels(label, kind)
            for each in seconds:
                step.observe(each)
                in_step.observe(rows)
        self.sequences.labels(label, version, "running").set(running)
        self.sequences.labels(label, version, "waiting").set(waiting)
        self.kv_tokens.labels(label, version).set(kv_tokens)
        self.kv_limit.labels(label, version).set(kv_limit)

    def on_generation_tokens(
        self, model: str, first_token_s: Sequence[float], inter_token_s: Sequence[float]
    ) -> None:
        label = self.model_label(model)
        if first_token_s:
            first = self.first_token.labels(label)
            for seconds in first_token_s:
                first.observe(seconds)
        if inter_token_s:
            gap = self.inter_token.labels(label)
            for seconds in inter_token_s:
                gap.observe(seconds)

    def on_rollout(self, model: str, decision: str, weight: float) -> None:
        label = self.model_label(model)
        self.rollout_weight.labels(label).set(weight)
        self.rollout_decisions.labels(label, decision).inc()

    def on_shadow(self, model: str, outcome: str, agreement: float | None) -> None:
        label = self.model_label(model)
        self.shadowed.labels(label, outcome).inc()
        if agreement is not None:
            self.agreement.labels(label).set(agreement)

    def on_routed(self, model: str, version: str, route: str, failed: bool) -> None:
        outcome = "error" if failed else "ok"
        self.routed.labels(self.model_label(model), version, route, outcome).inc()

    def on_generation_finished(
        self, model: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        label = self.model_label(model)
        self.generation_finished.labels(label, reason).inc()
        self.generated.labels(label, "prompt").inc(prompt_tokens)
        self.generated.labels(label, "completion").inc(completion_tokens)

    def on_texts(
        self,
        model: str,
        token_counts: Sequence[int],
        top_labels: Sequence[str] | None = None,
        top_scores: Sequence[float] | None = None,
    ) -> None:
        label = self.model_label(model)
        lengths = self.input_length.labels(label)
        for n in token_counts:
            lengths.observe(n)
        if top_scores is not None:
            confidence = self.confidence.labels(label)
            for score in top_scores:
                confidence.observe(score)
        if top_labels is not None:
            allowed = self._labels.get(model)
            for name in top_labels:
                known = allowed is None or name in allowed
                self.predicted.labels(label, name if known else UNKNOWN).inc()

    def on_drift(self, model: str, feature: str, psi: float) -> None:
        self.drift_psi.labels(self.model_label(model), feature).set(psi)

    def on_job(self, outcome: str, seconds: float) -> None:
        self.jobs.labels(outcome).inc()
        if outcome != "requeued":
            self.job_duration.observe(seconds)

    def on_jobs_waiting(self, depth: int) -> None:
        self.jobs_waiting.set(depth)

    def on_jobs_lost(self, count: int) -> None:
        self.jobs_lost.inc(count)
