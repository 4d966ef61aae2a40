"""The OpenTelemetry GenAI semantic conventions' server metrics, exported over OTLP beside the
Prometheus families of /metrics, for each request that generated text.

On when an OTLP endpoint is configured for metrics (`OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`; `OTEL_METRICS_EXPORTER=none` keeps them off), pushed
every `OTEL_METRIC_EXPORT_INTERVAL` ms (60 s by default). The instruments, with the buckets the
conventions give:

- `gen_ai.server.request.duration` (s): the request, from its first byte read to its answer;
- `gen_ai.server.time_to_first_token` (s): from its first byte read to its first token (the wait
  for a place in the running batch and the prompt's prefill included), successful requests;
- `gen_ai.server.time_per_output_token` (s): each answer's time after its first token over its
  tokens after the first, successful requests;
- `gen_ai.client.token.usage` ({token}): its prompt's tokens (`gen_ai.token.type` `input`) and
  its answers' (`output`). The conventions define token usage once, as seen by a client; the
  server reports the same instrument for what it served, so one dashboard reads either side.

Attributes: `gen_ai.operation.name` (`chat` for /v1/chat/completions, `text_completion` for
the other generation routes), `gen_ai.provider.name` (`inferd`), `gen_ai.request.model`, and
`error.type` (inferd's error code) on a request that failed.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from inferd.observability.otel import configured, protocol, resource
from inferd.observability.trace import RequestTrace

log = logging.getLogger("inferd.otel")

DURATION_BUCKETS: tuple[float, ...] = tuple(0.01 * 2**i for i in range(14))  # 0.01 ... 81.92
FIRST_TOKEN_BUCKETS: tuple[float, ...] = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1),
    *(0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
)
PER_TOKEN_BUCKETS: tuple[float, ...] = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2),
    *(0.3, 0.4, 0.5, 0.75, 1.0, 2.5),
)
TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, ... 67108864
OPERATIONS = {
    "/generate": "text_completion",
    "/v1/completions": "text_completion",
    "/v1/chat/completions": "chat",
}
"""The generation routes (a gRPC or V2 call that generated counts as a text completion), with
the conventions' name of their operation."""


@functools.cache
def shared_genai_metrics() -> GenAiMetrics | None:
    """The process's one recorder (HTTP and gRPC record into the same), made at first use
    from the environment; None when no OTLP endpoint is configured for metrics."""
    if not configured(signal="metrics"):
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    except ImportError:
        log.warning(
            "an OTLP endpoint is configured but OpenTelemetry's SDK is not installed "
            '(pip install "inferd[otel]"); no GenAI metrics are exported'
        )
        return None
    from inferd import __version__

    reader = PeriodicExportingMetricReader(_exporter())  # reads OTEL_METRIC_EXPORT_INTERVAL
    provider = MeterProvider(resource=resource(__version__), metric_readers=[reader])
    return GenAiMetrics(provider.get_meter("inferd", __version__))


def _exporter() -> Any:
    if protocol("metrics").startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter as GrpcMetricExporter,
    )

    return GrpcMetricExporter()


class GenAiMetrics:
    def __init__(self, meter: Any) -> None:
        def histogram(name: str, unit: str, about: str, buckets: tuple[float, ...]) -> Any:
            return meter.create_histogram(
                name, unit=unit, description=about, explicit_bucket_boundaries_advisory=buckets
            )

        self.duration = histogram(
            "gen_ai.server.request.duration",
            "s",
            "Generative AI server request duration such as time-to-last byte or last output token.",
            DURATION_BUCKETS,
        )
        self.first_token = histogram(
            "gen_ai.server.time_to_first_token",
            "s",
            "Time to generate first token for successful responses.",
            FIRST_TOKEN_BUCKETS,
        )
        self.per_token = histogram(
            "gen_ai.server.time_per_output_token",
            "s",
            "Time per output token generated after the first token for successful responses.",
            PER_TOKEN_BUCKETS,
        )
        self.tokens = histogram(
            "gen_ai.client.token.usage",
            "{token}",
            "Number of input and output tokens used.",
            TOKEN_BUCKETS,
        )

    def record(self, trace: RequestTrace, endpoint: str, status: int, total_s: float) -> None:
        """Records a request to a generation route, or one that generated text."""
        if endpoint not in OPERATIONS and not trace.answers:
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": OPERATIONS.get(endpoint, "text_completion"),
            "gen_ai.provider.name": "inferd",
        }
        if trace.model is not None:
            attributes["gen_ai.request.model"] = trace.model
        failed = status >= 400 or trace.error_code is not None
        if failed:
            attributes["error.type"] = str(trace.error_code or status)
        self.duration.record(total_s, attributes)
        if failed:
            return
        answers = trace.answers
        firsts = [a.first_token_at for a in answers if a.first_token_at is not None]
        if firsts:
            self.first_token.record(max(min(firsts) - trace.started, 0.0), attributes)
        for answer in answers:
            if answer.first_token_at is not None and answer.completion_tokens > 1:
                after = answer.ended - answer.first_token_at
                self.per_token.record(after / (answer.completion_tokens - 1), attributes)
        if answers:
            # each prompt once: the n answers to one prompt share it (a list of prompts: each)
            prompt = sum(a.prompt_tokens for a in answers if not a.shares_prompt)
            self.tokens.record(prompt, {**attributes, "gen_ai.token.type": "input"})
            output = sum(a.completion_tokens for a in answers)
            self.tokens.record(output, {**attributes, "gen_ai.token.type": "output"})
