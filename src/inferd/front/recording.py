"""What every request leaves behind, whatever its protocol: its count and latency in the
metrics, its stages, the live window's view of its model, and its one JSON log line (logger
`inferd.request`) with the request id, model, version, status, error code, outcome and
per-stage timings.

The outcome says whose a request's end was (inferd.observability.request_metrics.outcome_of):
a deadline that passed is a server error (5xx, logged at error level) only when the deadline
was the server's; one the client set itself is the client's (`client_deadline`, logged at info
level), though the client gets the same 504 (5040), or DEADLINE_EXCEEDED over gRPC, as
before."""

from __future__ import annotations

import logging
import random

from inferd.observability.genai_metrics import shared_genai_metrics
from inferd.observability.gpu import gpu_memory_mb
from inferd.observability.live import LiveWindow
from inferd.observability.metrics import Metrics
from inferd.observability.otel import shared_spans
from inferd.observability.request_metrics import SERVER_ERROR, outcome_of
from inferd.observability.trace import RequestTrace, trace_id_of

log = logging.getLogger("inferd.request")

ROUTE_KEY_MAX = 256
"""Characters of a route key that count (a longer one is cut, not refused)."""
TRACE_HEADER_MAX = 512
"""Characters of a W3C trace context header (`traceparent`, `tracestate`) kept."""


class RequestRecorder:
    """What every request leaves behind, whatever its protocol (HTTP here, gRPC in
    inferd.grpc_v2): its count and latency in the metrics, its stages for a model's request,
    and its log line (errors always, successes sampled at `sample_rate`; none for the
    endpoints in `quiet`, polled all day)."""

    def __init__(
        self,
        metrics: Metrics | None,
        sample_rate: float,
        gpu_memory: bool,
        live: LiveWindow | None = None,
        quiet: frozenset[str] = frozenset(),
    ) -> None:
        self.metrics = metrics
        self.quiet = quiet
        self.live = live
        self.sample_rate = sample_rate
        self.gpu_memory = gpu_memory
        self._random = random.Random()
        self.spans = shared_spans()
        """The OpenTelemetry spans' maker, when an OTLP endpoint is configured."""
        self.genai = shared_genai_metrics()
        """The GenAI conventions' metrics, when an OTLP endpoint is configured."""

    def finish(
        self,
        trace: RequestTrace,
        method: str,
        endpoint: str,
        path_model: str | None,
        status: int,
        total_s: float,
        quiet: bool = False,
    ) -> None:
        """`path_model`: the model the request's path names (requests that run no inference
        name it only there); `status`: the HTTP status (gRPC: the one its code maps to);
        `quiet`: a probe, counted and not logged."""
        try:
            outcome = outcome_of(status, trace.error_code, trace.deadline_by_client)
            if self.live is not None and trace.model is not None:
                self.live.record(trace.model, total_s, outcome == SERVER_ERROR)
            if self.metrics is not None:
                # the metrics bound the model label to the repository's models
                model = trace.model or path_model
                self.metrics.on_request(endpoint, model, status, trace.error_code, total_s, outcome)
                if trace.model is not None and trace.version is not None and status < 400:
                    self.metrics.on_stages(trace.model, trace.version, trace.stages())
            if self.spans is not None and not (quiet or endpoint in self.quiet):
                self.spans.record(
                    trace, "grpc" if method == "gRPC" else "http", method, endpoint, status
                )
            if self.genai is not None:
                self.genai.record(trace, endpoint, status, total_s)
            if quiet or endpoint in self.quiet:
                return
            failed = status >= 400 or trace.error_code is not None
            if not failed and self._random.random() >= self.sample_rate:
                return
            self._log_line(trace, method, status, endpoint, total_s, outcome)
        except Exception:
            log.exception("request observation failed; the response was unaffected")

    def _log_line(
        self,
        trace: RequestTrace,
        method: str,
        status: int,
        endpoint: str,
        total_s: float,
        outcome: str,
    ) -> None:
        fields: dict[str, object] = {
            "request_id": trace.request_id,
            "method": method,
            "endpoint": endpoint,
            "model": trace.model,
            "version": trace.version,
            "status": status,
            "code": trace.error_code,
            "outcome": outcome,
            "route": trace.route,
            "cache": trace.cache,
            "queue_ms": round(trace.queue_s * 1000, 3),
            "preprocess_ms": round(trace.preprocess_s * 1000, 3),
            "inference_ms": round(trace.inference_s * 1000, 3),
            "postprocess_ms": round(trace.postprocess_s * 1000, 3),
            "total_ms": round(total_s * 1000, 3),
            "load_ms": round(trace.load_s * 1000, 3),
            "batch_size": trace.batch_size,
            "items": trace.items,
            "input_length": trace.input_length,
            "output_length": trace.output_length,
        }
        if trace.client is not None:
            fields["client"] = trace.client
        if self.gpu_memory:
            memory = gpu_memory_mb()
            if memory is not None:
                fields["gpu_memory_mb"] = round(memory, 1)
        trace_id = trace.trace_id or trace_id_of(trace.traceparent)
        if trace_id is not None:
            fields["trace_id"] = trace_id
        if trace.payload is not None:
            fields["payload"] = trace.payload
        level = {"ok": logging.INFO, "client_deadline": logging.INFO, SERVER_ERROR: logging.ERROR}
        log.log(level.get(outcome, logging.WARNING), "request", extra=fields)
