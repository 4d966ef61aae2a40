"""Pure ASGI middleware that gives every request a trace, then writes its log line and metrics.

Every answer carries `Server-Timing: total;dur=<ms>`: the time from the server parsing the
request's first byte to the start of its answer (event-loop waits included), the figure the
latency metrics record.

Log lines: one JSON object per request, with the request id, model, version, HTTP status, error
code and per-stage timings; errors always, successes sampled at `log_sample_rate`. No payload is
logged unless `log_payloads` is set (then truncated and marked). Probe and /metrics requests are
counted but not logged.
"""

from __future__ import annotations

import logging
import random
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.observability.gpu import gpu_memory_mb
from inferd.observability.live import LiveWindow
from inferd.observability.metrics import Metrics
from inferd.observability.trace import RequestTrace, tracing
from inferd.server.auth import OPEN_PATHS
from inferd.server.http_limits import received_at

log = logging.getLogger("inferd.request")

QUIET_PATHS = OPEN_PATHS
"""Probes, metrics and the status page: polled all day, not logged per request (the paths that
need no key, inferd.server.auth)."""


PAYLOAD_LIMIT = 256
ROUTE_KEY_HEADER = b"x-inferd-route-key"
CACHE_HEADER = b"x-inferd-cache"
"""How the response cache answered (hit, miss, coalesced), on responses of models with one."""
ROUTE_KEY_MAX = 256
"""Characters of a route key that count (a longer one is cut, not refused)."""


def note_payload(trace: RequestTrace, body: bytes, enabled: bool) -> None:
    """With payload logging on (debug only), keeps a truncated, marked copy for the log line."""
    if not enabled:
        return
    text = body[:PAYLOAD_LIMIT].decode("utf-8", "replace")
    more = f" ... [{len(body) - PAYLOAD_LIMIT} more bytes]" if len(body) > PAYLOAD_LIMIT else ""
    trace.payload = f"[PAYLOAD, debug logging] {text}{more}"


def server_timing(started: float, load_s: float = 0.0) -> tuple[bytes, bytes]:
    """The `Server-Timing` header: milliseconds from reading the request to answering it, and
    of them those it waited for its model to load (`load`, only when it did)."""
    value = b"total;dur=%.3f" % ((time.perf_counter() - started) * 1000)
    if load_s > 0:
        value += b", load;dur=%.3f" % (load_s * 1000)
    return b"server-timing", value


class RequestRecorder:
    """What every request leaves behind, whatever its protocol (HTTP here, gRPC in
    inferd.grpc_v2): its count and latency in the metrics, its stages for a model's request,
    and its log line (errors always, successes sampled at `sample_rate`)."""

    def __init__(
        self,
        metrics: Metrics | None,
        sample_rate: float,
        gpu_memory: bool,
        live: LiveWindow | None = None,
    ) -> None:
        self.metrics = metrics
        self.live = live
        self.sample_rate = sample_rate
        self.gpu_memory = gpu_memory
        self._random = random.Random()

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
            if self.live is not None and trace.model is not None:
                self.live.record(trace.model, total_s, status >= 500)
            if self.metrics is not None:
                # the metrics bound the model label to the repository's models
                model = trace.model or path_model
                self.metrics.on_request(endpoint, model, status, trace.error_code, total_s)
                if trace.model is not None and trace.version is not None and status < 400:
                    self.metrics.on_stages(trace.model, trace.version, trace.stages())
            if quiet or endpoint in QUIET_PATHS:
                return
            failed = status >= 400 or trace.error_code is not None
            if not failed and self._random.random() >= self.sample_rate:
                return
            self._log_line(trace, method, status, endpoint, total_s, failed)
        except Exception:
            log.exception("request observation failed; the response was unaffected")

    def _log_line(
        self,
        trace: RequestTrace,
        method: str,
        status: int,
        endpoint: str,
        total_s: float,
        failed: bool,
    ) -> None:
        fields: dict[str, object] = {
            "request_id": trace.request_id,
            "method": method,
            "endpoint": endpoint,
            "model": trace.model,
            "version": trace.version,
            "status": status,
            "code": trace.error_code,
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
        if self.gpu_memory:
            memory = gpu_memory_mb()
            if memory is not None:
                fields["gpu_memory_mb"] = round(memory, 1)
        if trace.payload is not None:
            fields["payload"] = trace.payload
        level = logging.ERROR if status >= 500 else logging.WARNING if failed else logging.INFO
        log.log(level, "request", extra=fields)


class ObserveMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics | None,
        sample_rate: float,
        gpu_memory: bool = False,
        live: LiveWindow | None = None,
    ) -> None:
        self.app = app
        self.recorder = RequestRecorder(metrics, sample_rate, gpu_memory, live)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        received = received_at(scope)
        trace = RequestTrace(
            request_id=str(state.get("request_id", "")),
            started=received if received is not None else time.perf_counter(),
        )
        for name, value in scope["headers"]:
            if name == ROUTE_KEY_HEADER:
                trace.route_key = value[:ROUTE_KEY_MAX].decode("latin-1")
                break
        status = 500

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                timing = server_timing(trace.started, trace.load_s)
                headers = [*message.get("headers", []), timing]
                if trace.cache is not None:
                    headers.append((CACHE_HEADER, trace.cache.encode()))
                message["headers"] = headers
            await send(message)

        try:
            with tracing(trace):  # the engine and the routes fill it in as the request runs
                await self.app(scope, receive, send_and_watch)
        finally:
            route = scope.get("route")
            self.recorder.finish(
                trace,
                str(scope.get("method")),
                getattr(route, "path", None) or "unmatched",
                scope.get("path_params", {}).get("model"),
                status,
                time.perf_counter() - trace.started,
            )
