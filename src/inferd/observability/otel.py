"""OpenTelemetry traces: a span per request, its stages as child spans, exported over OTLP.

Off unless an OTLP endpoint is configured with the standard variables
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_TRACES_EXPORTER=none`
turns it off whatever they say). The exporter reads the rest of the standard variables itself:
`OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc`, the default, or `http/protobuf`), headers, timeout,
certificates, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, and
the batch processor's `OTEL_BSP_*`. Off, nothing is imported and a request pays two `is None`
tests.

Spans are made when a request ends, from what its trace (inferd.observability.trace) measured:
the request's span (`SERVER` kind) from the moment its first byte was read to its answer, the
parent the client sent in a W3C `traceparent` (HTTP header or gRPC metadata), and one child span
for each stage it went through, at the times it went through it: `tokenize`, `queue`, `run`,
`respond`; generation: `prefill` (to the first token) and `decode`. A `run` span links to the
span of the batch it ran in (`inferd.batch`, a trace of its own, made once per batch with its
rows), so the requests that shared a batch can be found from any one of them. Making spans on
the way out keeps the serving path as it is: the exporter's thread does the sending.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from inferd.observability.trace import BatchPart, RequestTrace

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext, Tracer

log = logging.getLogger("inferd.otel")

BATCH_SPANS_KEPT = 4096
"""Batches whose span is remembered for the requests that ran in them still to end."""

UNMATCHED = "unmatched"
"""The endpoint the recorder names a request that matched no route."""


def epoch_offset_ns() -> int:
    """What turns a `time.perf_counter()` reading into nanoseconds since the epoch, now (read
    for each request: the wall clock may be stepped while the server runs)."""
    return time.time_ns() - time.perf_counter_ns()


def epoch_ns(perf_counter_s: float, offset_ns: int) -> int:
    """A `time.perf_counter()` reading as nanoseconds since the epoch, as spans are timed."""
    return offset_ns + int(perf_counter_s * 1e9)


def configured(environ: Mapping[str, str] | None = None, signal: str = "traces") -> bool:
    """Whether the standard variables ask for `signal` (traces, metrics) to be exported
    over OTLP."""
    env = os.environ if environ is None else environ
    if env.get(f"OTEL_{signal.upper()}_EXPORTER", "otlp").strip().lower() == "none":
        return False
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = (f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    return any(env.get(name, "").strip() for name in names)


def protocol(signal: str) -> str:
    """The OTLP protocol the standard variables name for `signal`: grpc or http/protobuf."""
    return (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()


def resource(service_version: str) -> Any:
    """The resource inferd's telemetry describes: OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES first, `inferd` where they name no service."""
    from opentelemetry.sdk.resources import Resource

    found = Resource.create({"service.version": service_version})
    if str(found.attributes.get("service.name", "")).startswith("unknown_service"):
        found = found.merge(Resource({"service.name": "inferd"}))
    return found


@functools.cache
def shared_spans() -> RequestSpans | None:
    """The process's one spans' maker (HTTP and gRPC record into the same), made at first
    use from the environment."""
    from inferd import __version__

    return request_spans(__version__)


def request_spans(service_version: str) -> RequestSpans | None:
    """The spans' maker when an OTLP endpoint is configured, else None (and nothing imported).
    An endpoint without the `otel` extra installed is said once, at start, and tracing stays
    off: the server serves either way."""
    if not configured():
        return None
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "an OTLP endpoint is configured but OpenTelemetry's SDK is not installed "
            '(pip install "inferd[otel]"); requests are not traced'
        )
        return None
    exporter = _exporter()
    provider = TracerProvider(resource=resource(service_version))  # reads OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return RequestSpans(provider.get_tracer("inferd", service_version), provider)


def _exporter() -> Any:
    """The OTLP exporter `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` names: gRPC or HTTP."""
    if protocol("traces").startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )

    return GrpcSpanExporter()


class RequestSpans:
    """Turns each ended request's trace into its spans (see the module's docstring)."""

    def __init__(self, tracer: Tracer, provider: Any) -> None:
        from opentelemetry.trace import Link, SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._tracer = tracer
        self._provider = provider
        self._propagator = TraceContextTextMapPropagator()
        self._batches: OrderedDict[int, SpanContext] = OrderedDict()
        self._link, self._kind, self._status, self._code = Link, SpanKind, Status, StatusCode

    def record(
        self, trace: RequestTrace, protocol: str, method: str, endpoint: str, status: int
    ) -> None:
        """The spans of one ended request (`status`: its HTTP status, or the one its gRPC
        code maps to)."""
        from opentelemetry.trace import set_span_in_context

        parent = None
        if trace.traceparent is not None:
            carrier = {"traceparent": trace.traceparent}
            if trace.tracestate is not None:
                carrier["tracestate"] = trace.tracestate
            parent = self._propagator.extract(carrier)
        ended = time.perf_counter()
        offset = epoch_offset_ns()

        def at(perf_counter_s: float) -> int:
            return epoch_ns(perf_counter_s, offset)

        span = self._tracer.start_span(
            _span_name(protocol, method, endpoint),
            context=parent,
            kind=self._kind.SERVER,
            start_time=at(trace.started),
            attributes=_attributes(trace, protocol, method, endpoint, status),
        )
        if status >= 500:  # (a client's error is not the server's: its span stays unset)
            span.set_status(self._status(self._code.ERROR, f"inferd code {trace.error_code}"))
        inside = set_span_in_context(span)
        for stage, begun, finished in trace.intervals:
            self._tracer.start_span(stage, context=inside, start_time=at(begun)).end(at(finished))
        for part in trace.batches:
            queued = self._tracer.start_span(
                "queue", context=inside, start_time=at(part.enqueued_at)
            )
            queued.end(at(part.started))
            link = self._link(self._batch_span(trace, part, offset))
            ran = self._tracer.start_span(
                "run",
                context=inside,
                start_time=at(part.started),
                links=[link],
                attributes={"inferd.batch.rows": part.rows, "inferd.batch.id": part.serial},
            )
            ran.end(at(part.started + part.run_s))
        span.end(at(ended))
        trace.trace_id = format(span.get_span_context().trace_id, "032x")

    def _batch_span(self, trace: RequestTrace, part: BatchPart, offset: int) -> SpanContext:
        """The span of the batch `part` ran in, made by the first of its requests to end."""
        known = self._batches.get(part.serial)
        if known is not None:
            return known
        span = self._tracer.start_span(
            "inferd.batch",
            start_time=epoch_ns(part.started, offset),
            attributes={
                "inferd.batch.id": part.serial,
                "inferd.batch.rows": part.rows,
                "inferd.model": trace.model or "",
                "inferd.model.version": trace.version or "",
            },
        )
        span.end(epoch_ns(part.started + part.run_s, offset))
        context = span.get_span_context()
        self._batches[part.serial] = context
        while len(self._batches) > BATCH_SPANS_KEPT:
            self._batches.popitem(last=False)
        return context

    def close(self) -> None:
        """Sends what is still buffered (at shutdown)."""
        try:
            self._provider.shutdown()
        except Exception:
            log.exception("the span exporter failed to shut down")


def _span_name(protocol: str, method: str, endpoint: str) -> str:
    """`POST /embed`, `POST` for a request that matched no route, the gRPC method's full name."""
    if protocol != "http":
        return endpoint.lstrip("/")
    return method if endpoint == UNMATCHED else f"{method} {endpoint}"


def _attributes(
    trace: RequestTrace, protocol: str, method: str, endpoint: str, status: int
) -> dict[str, Any]:
    found: dict[str, Any] = {"inferd.request_id": trace.request_id}
    if protocol == "http":
        found["http.request.method"] = method
        if endpoint != UNMATCHED:
            found["http.route"] = endpoint
        found["http.response.status_code"] = status
    else:
        service, _, rpc = endpoint.lstrip("/").rpartition("/")
        found["rpc.system"] = "grpc"
        found["rpc.service"] = service
        found["rpc.method"] = rpc
    if trace.model is not None:
        found["inferd.model"] = trace.model
    if trace.version is not None:
        found["inferd.model.version"] = trace.version
    if trace.error_code is not None:
        found["inferd.error.code"] = trace.error_code
        found["error.type"] = str(trace.error_code)
    if trace.items:
        found["inferd.items"] = trace.items
    if trace.input_length:
        found["inferd.input_length"] = trace.input_length
    if trace.output_length:
        found["inferd.output_length"] = trace.output_length
    return found
