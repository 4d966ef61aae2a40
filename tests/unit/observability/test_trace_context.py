"""A request's trace as OpenTelemetry reads it: the stages it marks, the W3C trace id of its
client's `traceparent`, and when the standard variables turn span and metric export on."""

from __future__ import annotations

import pytest

from inferd.observability.otel import configured
from inferd.observability.trace import RequestTrace, trace_id_of

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_marked_stage_keeps_its_interval_and_adds_to_its_duration() -> None:
    trace = RequestTrace(request_id="r")
    trace.mark("tokenize", 1.0, 1.5)
    trace.mark("respond", 2.0, 2.25)
    trace.mark("respond", 3.0, 3.25)  # (a classifier over an embedding answers twice)
    trace.mark("prefill", 4.0, 4.5)
    assert trace.intervals == [
        ("tokenize", 1.0, 1.5),
        ("respond", 2.0, 2.25),
        ("respond", 3.0, 3.25),
        ("prefill", 4.0, 4.5),
    ]
    assert trace.preprocess_s == 0.5 and trace.postprocess_s == 0.5
    assert trace.inference_s == 0.0  # prefill is an interval only


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"00-{TRACE_ID}-00f067aa0ba902b7-01", TRACE_ID),
        (f" 00-{TRACE_ID}-00f067aa0ba902b7-00 ", TRACE_ID),
        (f"00-{'0' * 32}-00f067aa0ba902b7-01", None),  # all zeros: invalid
        (f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01", None),  # the standard's hex is lower case
        ("00-abc-def-01", None),
        ("", None),
        (None, None),
    ],
)
def test_the_trace_id_of_a_traceparent(header: str | None, expected: str | None) -> None:
    assert trace_id_of(header) == expected


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "inferd"}, False),
    ],
)
def test_spans_are_exported_only_when_an_endpoint_is_configured(
    environ: dict[str, str], on: bool
) -> None:
    assert configured(environ) is on


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_METRICS_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, True),
    ],
)
def test_metrics_have_their_own_endpoint_and_switch(environ: dict[str, str], on: bool) -> None:
    assert configured(environ, signal="metrics") is on
