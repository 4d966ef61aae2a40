"""A call of the inference service, observed as an HTTP request is: its own request trace
(inferd.observability.trace), and at its end the shared `RequestRecorder`, counted under its
full method name (`/inference.GRPCInferenceService/ModelInfer`) with the HTTP status its code
maps to. Metadata plays the part of headers (`x-request-id`, `x-inferd-route-key`); an error
ends the call with its gRPC status, `[code] message`, and the request id, inferd's code and
`retry-after` in the trailing metadata. A stream's requests are observed one by one, each as a
call of its own whose error goes back to the stream rather than ending it."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from inferd.clients import ANONYMOUS, current_client
from inferd.errors import DeadlineExceededError, DeadlineUnmetError, InferdError, InternalError
from inferd.front.recording import ROUTE_KEY_MAX, TRACE_HEADER_MAX, RequestRecorder
from inferd.front.statuses import http_status, retry_after_s
from inferd.grpc_v2.gate import PROBES
from inferd.grpc_v2.status_codes import GRPC_STATUS
from inferd.observability.trace import RequestTrace, tracing

log = logging.getLogger("inferd.grpc_v2.service")

SERVICE = "inference.GRPCInferenceService"
CLIENT_CLOSED = 499

R = TypeVar("R")


class Calls:
    """Runs and records the service's calls."""

    def __init__(self, recorder: RequestRecorder) -> None:
        self._recorder = recorder

    async def run(
        self,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        method: str,
        model: str | None,
        run: Callable[[], Awaitable[R]],
        quiet: bool = False,
    ) -> R:
        """Runs a call that the gate (inferd.grpc_v2.gate) let in; `quiet`: counted, not
        logged (probes, and refused messages, which the reader logs once a second)."""
        metadata = _metadata(context)
        trace = RequestTrace(
            request_id=metadata.get("x-request-id") or uuid.uuid4().hex,
            started=time.perf_counter(),
        )
        _take_metadata(trace, metadata)
        status = 500
        try:
            with tracing(trace):
                answer = await run()
            status = 200
            return answer
        except InferdError as raised:
            exc = _for_grpc(raised)
            status = _mark(trace, exc)
            await _abort(context, trace, exc)
            raise  # (abort raised already)
        except asyncio.CancelledError:
            status = CLIENT_CLOSED
            raise
        except Exception as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            log.exception("internal error", extra={"request_id": trace.request_id})
            error = InternalError("the request failed inside the server")
            status = _mark(trace, error)
            await _abort(context, trace, error)
            raise
        finally:
            context.set_trailing_metadata((("x-request-id", trace.request_id),))
            self._recorder.finish(
                trace,
                "gRPC",
                f"/{SERVICE}/{method}",
                model,
                status,
                time.perf_counter() - trace.started,
                quiet=quiet or method in PROBES,
            )

    async def refuse(
        self,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        method: str,
        error: InferdError,
        quiet: bool,
    ) -> None:
        """Answers a call the gate or the reader refused with `error`, recorded as any."""

        async def refused() -> None:
            raise error

        await self.run(context, method, None, refused, quiet)

    async def stream_request(
        self,
        context: Any,
        request_id: str,
        model: str,
        run: Callable[[], Awaitable[None]],
    ) -> None:
        """One request of a stream, observed as a call of its own; its error is raised to
        the stream (as an InferdError), not ending the stream."""
        trace = RequestTrace(request_id=request_id or uuid.uuid4().hex, started=time.perf_counter())
        metadata = _metadata(context)
        _take_metadata(trace, metadata)
        status = 500
        try:
            with tracing(trace):
                await run()
            status = 200
        except InferdError as raised:
            exc = _for_grpc(raised)
            status = _mark(trace, exc)
            raise exc from None
        except asyncio.CancelledError:
            status = CLIENT_CLOSED
            raise
        except Exception as exc:
            log.exception("internal error", extra={"request_id": trace.request_id})
            error = InternalError("the request failed inside the server")
            status = _mark(trace, error)
            raise error from exc
        finally:
            self._recorder.finish(
                trace,
                "gRPC",
                f"/{SERVICE}/ModelStreamInfer",
                model,
                status,
                time.perf_counter() - trace.started,
            )


def _mark(trace: RequestTrace, exc: InferdError) -> int:
    trace.error_code = int(exc.code)
    return http_status(exc)


async def _abort(
    context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    trace: RequestTrace,
    exc: InferdError,
) -> None:
    trailing = [("x-request-id", trace.request_id), ("inferd-code", str(int(exc.code)))]
    retry = retry_after_s(exc)
    if retry is not None:
        trailing.append(("retry-after", str(max(1, round(retry)))))
    await context.abort(GRPC_STATUS[exc.code], f"[{int(exc.code)}] {exc.message}", tuple(trailing))


def _take_metadata(trace: RequestTrace, metadata: dict[str, str]) -> None:
    """What a call tells its trace: its client (the gate set it), its route key and the W3C
    trace context."""
    client = current_client()
    if client is not ANONYMOUS:
        trace.client = client.name
    key = metadata.get("x-inferd-route-key")
    if key:
        trace.route_key = key[:ROUTE_KEY_MAX]
    parent = metadata.get("traceparent")
    if parent:
        trace.traceparent = parent[:TRACE_HEADER_MAX]
        trace.tracestate = metadata.get("tracestate", "")[:TRACE_HEADER_MAX] or None


def _metadata(context: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            found.setdefault(key.lower(), value)
    return found


def _for_grpc(exc: InferdError) -> InferdError:
    """A refusal for a deadline the queue's expected wait exceeds is, for a gRPC call whose
    deadline is its client's, DEADLINE_EXCEEDED (over HTTP it stays 429 with Retry-After)."""
    if isinstance(exc, DeadlineUnmetError):
        return DeadlineExceededError(exc.message)
    return exc
