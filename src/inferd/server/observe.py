"""Pure ASGI middleware that gives every request a trace, then writes its log line and metrics.

Every answer carries `Server-Timing: total;dur=<ms>`: the time from the server parsing the
request's first byte to the start of its answer (event-loop waits included), the figure the
latency metrics record. A 429 to a client that came back before its last `Retry-After` was
over is held back until then (`hold;dur=`; the metrics leave the hold out).

Log lines (written by inferd.front.recording): one JSON object per request, with the request
id, model, version, HTTP status, error code and per-stage timings; errors always, successes
sampled at `log_sample_rate`. No payload is logged unless `log_payloads` is set (then truncated
and marked). Probe and /metrics requests are counted but not logged.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.front.recording import ROUTE_KEY_MAX, TRACE_HEADER_MAX, RequestRecorder
from inferd.observability.live import LiveWindow
from inferd.observability.metrics import Metrics
from inferd.observability.trace import RequestTrace, tracing
from inferd.server.auth import OPEN_PATHS
from inferd.server.http_limits import received_at
from inferd.server.pacing import pacer_of

QUIET_PATHS = OPEN_PATHS
"""Probes, metrics and the status page: polled all day, not logged per request (the paths that
need no key, inferd.server.auth)."""


PAYLOAD_LIMIT = 256
ROUTE_KEY_HEADER = b"x-inferd-route-key"
TRACEPARENT_HEADER = b"traceparent"
TRACESTATE_HEADER = b"tracestate"
"""W3C trace context: the parent of the request's span (inferd.observability.otel)."""
CACHE_HEADER = b"x-inferd-cache"
"""How the response cache answered (hit, miss, coalesced), on responses of models with one."""


def note_payload(trace: RequestTrace, body: bytes, enabled: bool) -> None:
    """With payload logging on (debug only), keeps a truncated, marked copy for the log line."""
    if not enabled:
        return
    text = body[:PAYLOAD_LIMIT].decode("utf-8", "replace")
    more = f" ... [{len(body) - PAYLOAD_LIMIT} more bytes]" if len(body) > PAYLOAD_LIMIT else ""
    trace.payload = f"[PAYLOAD, debug logging] {text}{more}"


def server_timing(
    started: float, load_s: float = 0.0, inference_s: float = 0.0
) -> tuple[bytes, bytes]:
    """The `Server-Timing` header: milliseconds from reading the request to answering it, and
    of them those it waited for its model to load (`load`, only when it did) and those its
    batches ran (`run`, only when they did: the rest is the wait, the parsing and the answer)."""
    value = b"total;dur=%.3f" % ((time.perf_counter() - started) * 1000)
    if load_s > 0:
        value += b", load;dur=%.3f" % (load_s * 1000)
    if inference_s > 0:
        value += b", run;dur=%.3f" % (inference_s * 1000)
    return b"server-timing", value


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
        self.metrics = metrics
        self.recorder = RequestRecorder(metrics, sample_rate, gpu_memory, live, QUIET_PATHS)

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
            elif name == TRACEPARENT_HEADER:
                trace.traceparent = value[:TRACE_HEADER_MAX].decode("latin-1")
            elif name == TRACESTATE_HEADER:
                trace.tracestate = value[:TRACE_HEADER_MAX].decode("latin-1")
        status = 500
        held_s = 0.0

        async def send_and_watch(message: Message) -> None:
            nonlocal status, held_s
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if status == 429:
                    held_s = await self._pace(scope, message)
                timing = server_timing(trace.started, trace.load_s, trace.inference_s)
                if held_s > 0:
                    timing = (timing[0], timing[1] + b", hold;dur=%.3f" % (held_s * 1000))
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
                time.perf_counter() - trace.started - held_s,  # the decision, not the hold
            )

    async def _pace(self, scope: Scope, start: Message) -> float:
        """Holds back a 429 the app made when its client came back before its last
        `Retry-After` was over (inferd.server.http_limits, `Pacer`); the seconds held."""
        pacer = pacer_of(scope)
        retry = next((v for n, v in start.get("headers", []) if n == b"retry-after"), None)
        if pacer is None or retry is None or not retry.isdigit():
            return 0.0
        hold_s = pacer.hold_s(float(retry))
        if hold_s > 0:
            pacer.release()  # (held, it no longer counts as arriving for its model)
            if self.metrics is not None:
                self.metrics.on_paced(getattr(scope.get("route"), "path", None) or "unmatched")
            await asyncio.sleep(hold_s)
        return hold_s
