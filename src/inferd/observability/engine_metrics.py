"""The metrics read from the engine at scrape time: queue depths, versions' readiness and load
time, failed rollouts, requests in flight, and per version its runtime instances, its response
cache and its residency. The engine is read through `ServerView`, a protocol: nothing of the
data path is imported."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


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
    """A version's residency (inferd.engine.resident.residency), as the metrics read it."""

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
    def device_footprint(self) -> Mapping[int, int] | None: ...
    @property
    def loads(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def cold_waits(self) -> int: ...
    @property
    def cold_wait_s(self) -> float: ...
    @property
    def loading(self) -> bool: ...


class ServerView(Protocol):
    """What the metrics read from the engine at scrape time."""

    def queue_depths(self) -> Iterable[tuple[str, str, int]]: ...
    def model_states(self) -> Iterable[tuple[str, str, bool, float | None]]: ...
    def instance_loads(self) -> Iterable[tuple[str, str, InstanceFacts]]: ...
    def cache_states(self) -> Iterable[tuple[str, str, CacheFacts]]: ...
    def residency_facts(self) -> Iterable[ResidencyFacts]: ...
    def rollout_failures(self) -> Iterable[tuple[str, bool]]: ...
    def kv_usages(self) -> Iterable[tuple[str, str, int, int]]: ...
    def waiting_requests(self) -> int: ...
    @property
    def max_loaded_versions(self) -> int: ...
    @property
    def in_flight(self) -> int: ...


class EngineCollector(Collector):
    """The engine's state, read from the view attached (nothing before one is)."""

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
        failed = GaugeMetricFamily(
            "inferd_rollout_failed",
            "1 while the model's rollout failed (its state file could not be read): it serves "
            "by its version policy, /ready's per-model detail says why",
            labels=["model"],
        )
        for model, is_failed in view.rollout_failures():
            failed.add_metric([model], 1.0 if is_failed else 0.0)
        yield failed
        flight = GaugeMetricFamily("inferd_in_flight_requests", "Admitted, unanswered requests")
        flight.add_metric([], view.in_flight)
        yield flight
        yield from _instance_metrics(view.instance_loads())
        yield from _cache_metrics(view.cache_states())
        yield from _residency_metrics(view.residency_facts())


def _residency_metrics(facts: Iterable[ResidencyFacts]) -> Iterable[Metric]:
    """Per version: whether it is in memory, what its load added (to the process's resident
    memory, and to each GPU's used memory), its on-demand loads and evictions, and the time
    requests waited for those loads."""
    labels = ["model", "version", "residency"]
    resident = GaugeMetricFamily(
        "inferd_model_resident", "1 when the version is in memory", labels=labels
    )
    footprint = GaugeMetricFamily(
        "inferd_model_resident_bytes",
        "What the version's last load added to the process's resident memory",
        labels=labels,
    )
    on_device = GaugeMetricFamily(
        "inferd_model_resident_device_bytes",
        "What the version's last load added to the memory used on a GPU its instances run on",
        labels=[*labels, "gpu"],
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
        for gpu, held in sorted((fact.device_footprint or {}).items()):
            on_device.add_metric([*key, str(gpu)], held)
        loads.add_metric(key, fact.loads)
        evictions.add_metric(key, fact.evictions)
        waits.add_metric(key, fact.cold_waits)
        waited.add_metric(key, fact.cold_wait_s)
    yield from (resident, footprint, on_device, loads, evictions, waits, waited)


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
