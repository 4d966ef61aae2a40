"""The GenAI conventions' instruments as one request's trace fills them, read back from
OpenTelemetry's own in-memory reader (the SDK is the `otel` extra: the slow tier)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from inferd.observability.genai_metrics import GenAiMetrics
from inferd.observability.trace import Answer, RequestTrace


def points(reader: InMemoryMetricReader) -> dict[tuple[str, str], Any]:
    data = reader.get_metrics_data()
    assert data is not None
    found = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    kind = str(point.attributes.get("gen_ai.token.type", ""))
                    found[metric.name, kind] = point
    return found


def test_a_prompt_counts_once_however_many_answers_share_it() -> None:
    reader = InMemoryMetricReader()
    metrics = GenAiMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    trace = RequestTrace(request_id="r", started=10.0, model="gen")
    # two prompts (a list on /v1/completions), the first answered twice (n = 2)
    trace.answered(Answer(7, 5, 10.1, 10.3, 10.7))
    trace.answered(Answer(7, 4, 10.1, 10.3, 10.6, shares_prompt=True))
    trace.answered(Answer(3, 2, 10.1, 10.2, 10.4))
    metrics.record(trace, "/v1/completions", 200, 0.8)
    found = points(reader)
    assert found["gen_ai.client.token.usage", "input"].sum == 10  # 7 + 3, not 7 + 7 + 3
    assert found["gen_ai.client.token.usage", "output"].sum == 11
    first = found["gen_ai.server.time_to_first_token", ""]
    assert first.count == 1 and abs(first.sum - 0.2) < 1e-9  # the earliest first token
    per_token = found["gen_ai.server.time_per_output_token", ""]
    assert per_token.count == 3  # one an answer past its first token
    duration = found["gen_ai.server.request.duration", ""]
    assert duration.count == 1 and duration.sum == 0.8
    assert dict(duration.attributes) == {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.provider.name": "inferd",
        "gen_ai.request.model": "gen",
    }


def test_a_request_to_another_route_is_not_a_generation() -> None:
    reader = InMemoryMetricReader()
    metrics = GenAiMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    metrics.record(RequestTrace(request_id="r", model="minilm"), "/embed", 200, 0.01)
    data = reader.get_metrics_data()
    assert data is None or not any(
        m.data.data_points
        for r in data.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
    )
