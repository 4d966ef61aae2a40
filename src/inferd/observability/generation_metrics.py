"""The metrics of generation: time to first token and between tokens, tokens prompted and
generated, how generations finished, each prefill and decode step, and the running batch and
its KV cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferd.observability.metric_bounds import SECONDS_BUCKETS, SIZE_BUCKETS


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
        self.sequences = Gauge(
            "inferd_generation_sequences",
            "Sequences running (in the batch) or waiting",
            ["model", "version", "state"],
            registry=registry,
        )
        self.kv_tokens = Gauge(
            "inferd_generation_kv_cache_tokens",
            "Token slots the KV cache holds, padding included",
            ["model", "version"],
            registry=registry,
        )
        self.kv_limit = Gauge(
            "inferd_generation_kv_cache_limit_tokens",
            "The KV cache budget (max_kv_tokens)",
            ["model", "version"],
            registry=registry,
        )

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
        label = self._model_label(model)
        if seconds:
            step = self.step.labels(label, kind)
            in_step = self.rows.labels(label, kind)
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
        label = self._model_label(model)
        if first_token_s:
            first = self.first_token.labels(label)
            for seconds in first_token_s:
                first.observe(seconds)
        if inter_token_s:
            gap = self.inter_token.labels(label)
            for seconds in inter_token_s:
                gap.observe(seconds)

    def on_generation_finished(
        self, model: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        label = self._model_label(model)
        self.finished.labels(label, reason).inc()
        self.generated.labels(label, "prompt").inc(prompt_tokens)
        self.generated.labels(label, "completion").inc(completion_tokens)
