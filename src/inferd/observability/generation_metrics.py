"""The metrics of generation: time to first token and between tokens, tokens prompted and
generated, how generations finished, each prefill and decode step, and the running batch and
its KV cache."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferd.observability.metric_bounds import SECONDS_BUCKETS, SIZE_BUCKETS
from inferd.observability.observer import GenerationFinished, GenerationStep, GenerationTokens


class GenerationMetrics:
    def __init__(
        self, registry: CollectorRegistry, model_label: Callable[[str | None], str]
    ) -> None:
        self._model_label = model_label
        self.first_token = Histogram(
            "inferd_generation_time_to_first_token_seconds",
            "From a generation's arrival to its first token (queue and prefill)",
            ["model"],
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.inter_token = Histogram(
            "inferd_generation_inter_token_seconds",
            "Between a sequence's consecutive tokens",
            ["model"],
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.generated = Counter(
            "inferd_generation_tokens",
            "Tokens by kind: prompt (prefilled) or completion "
            "(generated); rate() of completion is tokens per second",
            ["model", "kind"],
            registry=registry,
        )
        self.finished = Counter(
            "inferd_generation_finished",
            "Generations by finish reason",
            ["model", "reason"],
            registry=registry,
        )
        self.step = Histogram(
            "inferd_generation_step_seconds",
            "One prefill or decode step of the batch",
            ["model", "kind"],
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.rows = Histogram(
            "inferd_generation_step_rows",
            "Sequences in one prefill or decode step",
            ["model", "kind"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.sequences, self.kv_tokens, self.kv_limit = _batch_gauges(registry)

    def on_generation_step(self, event: GenerationStep) -> None:
        label, version = self._model_label(event.model), event.version
        if event.seconds:
            step = self.step.labels(label, event.kind)
            in_step = self.rows.labels(label, event.kind)
            for each in event.seconds:
                step.observe(each)
                in_step.observe(event.rows)
        self.sequences.labels(label, version, "running").set(event.running)
        self.sequences.labels(label, version, "waiting").set(event.waiting)
        self.kv_tokens.labels(label, version).set(event.kv_tokens)
        self.kv_limit.labels(label, version).set(event.kv_limit)

    def on_generation_tokens(self, event: GenerationTokens) -> None:
        label = self._model_label(event.model)
        if event.first_token_s:
            first = self.first_token.labels(label)
            for seconds in event.first_token_s:
                first.observe(seconds)
        if event.inter_token_s:
            gap = self.inter_token.labels(label)
            for seconds in event.inter_token_s:
                gap.observe(seconds)

    def on_generation_finished(self, event: GenerationFinished) -> None:
        label = self._model_label(event.model)
        self.finished.labels(label, event.reason).inc()
        self.generated.labels(label, "prompt").inc(event.prompt_tokens)
        self.generated.labels(label, "completion").inc(event.completion_tokens)


def _batch_gauges(registry: CollectorRegistry) -> tuple[Gauge, Gauge, Gauge]:
    """The running batch's gauges: its sequences by state, its KV cache's tokens and limit."""
    sequences = Gauge(
        "inferd_generation_sequences",
        "Sequences running (in the batch) or waiting",
        ["model", "version", "state"],
        registry=registry,
    )
    kv_tokens = Gauge(
        "inferd_generation_kv_cache_tokens",
        "Token slots the KV cache holds, padding included",
        ["model", "version"],
        registry=registry,
    )
    kv_limit = Gauge(
        "inferd_generation_kv_cache_limit_tokens",
        "The KV cache budget (max_kv_tokens)",
        ["model", "version"],
        registry=registry,
    )
    return sequences, kv_tokens, kv_limit
