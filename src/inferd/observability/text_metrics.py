"""The metrics of the texts text models served: their length in tokens, a classifier's top
score and top label (one of the model's configured labels), and the drift of those from their
reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferd.observability.metric_bounds import CONFIDENCE_BUCKETS, LENGTH_BUCKETS, UNKNOWN
from inferd.observability.observer import TextsServed


class TextMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        model_label: Callable[[str | None], str],
        labels_by_model: dict[str, Sequence[str]],
        # models absent here have labels bounded by their output size: all are allowed
    ) -> None:
        self._model_label = model_label
        self._labels = {m: set(v) for m, v in labels_by_model.items()}
        self.input_length = Histogram(
            "inferd_input_length_tokens",
            "Tokens per text",
            ["model"],
            buckets=LENGTH_BUCKETS,
            registry=registry,
        )
        self.confidence = Histogram(
            "inferd_top_confidence",
            "Score of the top label per text",
            ["model"],
            buckets=CONFIDENCE_BUCKETS,
            registry=registry,
        )
        self.predicted = Counter(
            "inferd_predicted_labels", "Top labels predicted", ["model", "label"], registry=registry
        )
        self.drift_psi = Gauge(
            "inferd_drift_psi",
            "Population stability index, recent window against reference",
            ["model", "feature"],
            registry=registry,
        )

    def on_texts(self, event: TextsServed) -> None:
        label = self._model_label(event.model)
        lengths = self.input_length.labels(label)
        for n in event.token_counts:
            lengths.observe(n)
        if event.top_scores is not None:
            confidence = self.confidence.labels(label)
            for score in event.top_scores:
                confidence.observe(score)
        if event.top_labels is not None:
            allowed = self._labels.get(event.model)
            for name in event.top_labels:
                known = allowed is None or name in allowed
                self.predicted.labels(label, name if known else UNKNOWN).inc()

    def on_drift(self, model: str, feature: str, psi: float) -> None:
        self.drift_psi.labels(self._model_label(model), feature).set(psi)
