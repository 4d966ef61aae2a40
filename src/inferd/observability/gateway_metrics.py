"""The Gateway API Inference Extension's model-server protocol: the gauges an inference
gateway's endpoint picker (EPP) scrapes from each replica's /metrics to pick where a request
goes, with the protocol's types and meaning, under inferd's names.

- TotalQueuedRequests (gauge): `inferd:num_requests_waiting`, the requests admitted and
  waiting to start, in batchers' queues and generators' waiting lines (a request counts once,
  however many texts or answers it holds);
- TotalRunningRequests (gauge): `inferd:num_requests_running`, those admitted and not waiting
  (running, or being read, tokenized, answered);
- KVCacheUtilization (gauge): `inferd:kv_cache_usage_perc`, the KV cache tokens the running
  generations reserve (each its prompt and its most new tokens) over the most they may
  reserve, 0 to 1 as vLLM gives it: at 1 no generation more joins for want of cache (0
  without a generator);
- LoRA adapters (gauge with labels): `inferd:lora_requests_info`, the time of the scrape,
  labelled with the models in memory (`running_lora_adapters`), those being loaded for
  waiting requests (`waiting_lora_adapters`) and how many may be in memory at once
  (`max_lora`).

The adapters family is where inferd goes past the servers the protocol was written for: a
replica's adapters are its *models in memory* (the many-models residency), so the picker's
adapter affinity sends each model's requests to replicas that hold it loaded, and cold loads
fall. `max_lora` is `max_loaded_versions` where that bounds the versions in memory, and
otherwise the number of models the repository holds (each may be loaded; a memory budget
evicts the least recently used idle one to make room).

The endpoint picker is pointed at them with its metric flags (deploy/kubernetes's
`inference-gateway` overlay)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.observability.engine_metrics import ServerView

WAITING = "inferd:num_requests_waiting"
RUNNING = "inferd:num_requests_running"
KV_CACHE = "inferd:kv_cache_usage_perc"
ADAPTERS = "inferd:lora_requests_info"


class GatewayCollector(Collector):
    """The protocol's gauges, read from the view attached (nothing before one is)."""

    def __init__(
        self, view: Callable[[], ServerView | None], clock: Callable[[], float] = time.time
    ) -> None:
        self._view = view
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        view = self._view()
        if view is None:
            return
        waiting = view.waiting_requests()
        yield _gauge(
            WAITING, "Requests waiting in the queues (the protocol's TotalQueuedRequests)", waiting
        )
        running = max(view.in_flight - waiting, 0)
        yield _gauge(RUNNING, "Requests admitted and not waiting (TotalRunningRequests)", running)
        held = limit = 0
        for _, _, tokens, most in view.kv_usages():
            held, limit = held + tokens, limit + most
        usage = held / limit if limit > 0 else 0.0
        yield _gauge(
            KV_CACHE, "KV cache tokens held over the most held, 0 to 1 (KVCacheUtilization)", usage
        )
        yield self._adapters(view)

    def _adapters(self, view: ServerView) -> Metric:
        facts = list(view.residency_facts())
        resident = sorted({f.model for f in facts if f.resident})
        loading = sorted({f.model for f in facts if f.loading and f.model not in resident})
        models = {f.model for f in facts}
        bound = view.max_loaded_versions
        family = GaugeMetricFamily(
            ADAPTERS,
            "The models in memory and those loading, as the protocol's LoRA adapters; the value "
            "is when this was read (seconds since the epoch)",
            labels=["running_lora_adapters", "waiting_lora_adapters", "max_lora"],
        )
        family.add_metric(
            [",".join(resident), ",".join(loading), str(bound if bound > 0 else len(models))],
            self._clock(),
        )
        return family


def _gauge(name: str, about: str, value: float) -> Metric:
    family = GaugeMetricFamily(name, about)
    family.add_metric([], value)
    return family
