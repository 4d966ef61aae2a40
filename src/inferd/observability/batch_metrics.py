"""The metrics of the batches a runtime ran: their rows and items, real and padded elements,
and the out-of-memory failures that lowered a version's batch size limit."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferd.observability.metric_bounds import SIZE_BUCKETS
from inferd.observability.observer import BatchRan, MemoryPressure


class BatchMetrics:
    def __init__(
        self, registry: CollectorRegistry, model_label: Callable[[str | None], str]
    ) -> None:
        self._model_label = model_label
        self.batch_rows = Histogram(
            "inferd_batch_size",
            "Rows in a batch run",
            ["model", "version"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.batch_items = Histogram(
            "inferd_batch_items",
            "Queued items (requests or texts) in a batch run",
            ["model", "version"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter(
            "inferd_padded_elements",
            "Elements of padded inputs (tokens for text) run, by kind: "
            "real or padded; real/padded is the padding efficiency",
            ["model", "version", "kind"],
            registry=registry,
        )
        self.oom_events = Counter(
            "inferd_out_of_memory_events",
            "Batches that ran out of memory",
            ["model", "version"],
            registry=registry,
        )
        self.batch_limit = Gauge(
            "inferd_batch_size_limit",
            "Batch size limit now (lowered after out-of-memory)",
            ["model", "version"],
            registry=registry,
        )

    def on_batch(self, event: BatchRan) -> None:
        label, version, record = self._model_label(event.model), event.version, event.record
        self.batch_rows.labels(label, version).observe(record.rows)
        self.batch_items.labels(label, version).observe(record.items)
        if record.padded_elements:
            self.tokens.labels(label, version, "real").inc(record.real_elements)
            self.tokens.labels(label, version, "padded").inc(record.padded_elements)

    def on_memory_pressure(self, event: MemoryPressure) -> None:
        label = self._model_label(event.model)
        self.oom_events.labels(label, event.version).inc()
        self.batch_limit.labels(label, event.version).set(event.limit)
