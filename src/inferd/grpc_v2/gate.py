"""What a call of the inference service passes before its message is read.

Every method is registered to take its request as bytes, and as a client stream (a unary
call's one message is read by inferd, not by gRPC, when the call is let in): so a call without
its key, or over the limit of calls, is answered from its metadata alone, and its message is
never read, let alone parsed (a client sending 64 MiB without a key costs the server nothing
but the bytes gRPC's core holds). Then the message is parsed by `Reader` (bounded, off the
loop when large) and the service's method runs.

The limit: `grpc_max_calls` calls of the service at a time, streams included; one over it is
answered RESOURCE_EXHAUSTED (code 4290) with the reason, and counted in
`inferd_grpc_refused_total{reason="calls"}`. A stream over it is answered once its client has
half-closed (what it sent read and dropped unparsed, within bounds: `_Draining`), so that the
refusal is what the client sees.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import grpc

from inferd.clients import set_client
from inferd.errors import InferdError, InvalidInputError, QueueFullError
from inferd.front.keys import Keys, bearer
from inferd.grpc_v2.reader import Reader
from inferd.observability.metrics import Metrics

PROBES = frozenset({"ServerLive", "ServerReady"})
"""Open without a key (as HTTP's `/v2/health/...`)."""
ADMIN = frozenset({"RepositoryModelLoad", "RepositoryModelUnload"})
STREAMED = frozenset({"ModelStreamInfer"})
RAW = frozenset({"ModelInfer", "ModelStreamInfer"})
"""Methods whose requests are read by `Reader.infer_request` (raw contents kept as views)."""

Refuse = Callable[[Any, str, InferdError, bool], Awaitable[Any]]
"""`(context, method, error, quiet)`: answers the call with the error (and records it)."""

REFUSED_STREAM_DRAIN_S = 0.5
REFUSED_STREAM_DRAIN_BYTES = 1 << 20
MAX_DRAINING_STREAMS = 64
"""Bounds of `_drained`: per refused stream, and streams drained at a time (past it, a refused
stream is answered at once)."""


class Gate:
    def __init__(self, keys: Keys, max_calls: int, metrics: Metrics | None) -> None:
        self.keys = keys
        self.max_calls = max_calls
        self.metrics = metrics
        self.calls = 0

    def enter(self, method: str, context: Any) -> InferdError | None:
        """Why the call may not go on (None: it holds a slot now, to `leave`). A call let in
        is served as its key's client, or without API keys its peer address's (set for the
        rest of the call: each runs in a task of its own)."""
        if method not in PROBES:
            token = bearer(_authorization(context))
            refused = self.keys.refusal(method in ADMIN, token)
            if refused is not None:
                return refused
            set_client(self.keys.client_for(token, _peer_address(context)))
        if self.calls >= self.max_calls:
            if self.metrics is not None:
                self.metrics.on_grpc_refused("calls")
            return QueueFullError(
                f"the server has {self.calls} gRPC calls in flight, its limit "
                "(grpc_max_calls); retry later",
                retry_after_s=1.0,
            )
        self.calls += 1
        return None

    def leave(self) -> None:
        self.calls -= 1


def _authorization(context: Any) -> bytes | None:
    for key, value in context.invocation_metadata() or ():
        if key.lower() == "authorization" and isinstance(value, str):
            return value.encode("latin-1", "replace")
    return None


def _peer_address(context: Any) -> str | None:
    """The address of `context.peer()` (`ipv4:127.0.0.1:5000`, `ipv6:%5B::1%5D:5000`)."""
    peer = unquote(str(context.peer() or ""))
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        return rest.partition("]")[0].lstrip("[")
    return peer or None


def gated_handlers(
    service: Any,
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]],
    gate: Gate,
    reader: Reader,
    refuse: Refuse,
    serializers: dict[str, Callable[[Any], bytes]],
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The generated handlers of `service`'s methods, each behind the gate: registered as a
    client stream of bytes, its message parsed by `reader` once the gate let it in."""
    gated: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    draining = _Draining()
    for method, handler in handlers.items():
        kind = handler.request_deserializer.__self__  # type: ignore[union-attr]  # FromString
        serializer = serializers.get(method, handler.response_serializer)
        behavior = getattr(service, method)
        if method in STREAMED:
            gated[method] = grpc.stream_stream_rpc_method_handler(
                _stream(method, behavior, gate, reader, refuse, draining), None, serializer
            )
        else:
            gated[method] = grpc.stream_unary_rpc_method_handler(
                _unary(method, kind, behavior, gate, reader, refuse), None, serializer
            )
    return gated


def _unary(
    method: str,
    kind: Any,
    behavior: Callable[[Any, Any], Awaitable[Any]],
    gate: Gate,
    reader: Reader,
    refuse: Refuse,
) -> Callable[[AsyncIterator[bytes], Any], Awaitable[Any]]:
    async def handle(requests: AsyncIterator[bytes], context: Any) -> Any:
        refused = gate.enter(method, context)
        if refused is not None:
            return await refuse(context, method, refused, False)
        try:
            try:
                data = await anext(aiter(requests))
                if method in RAW:
                    request: Any = await reader.infer_request(data)
                else:
                    request = await reader.message(kind, data)
            except StopAsyncIteration:
                return await refuse(
                    context, method, InvalidInputError("the call carried no request"), False
                )
            except InferdError as exc:
                return await refuse(context, method, exc, True)
            return await behavior(request, context)
        finally:
            gate.leave()

    return handle


def _stream(
    method: str,
    behavior: Callable[[Any, Any], AsyncIterator[Any]],
    gate: Gate,
    reader: Reader,
    refuse: Refuse,
    draining: _Draining,
) -> Callable[[AsyncIterator[bytes], Any], AsyncIterator[Any]]:
    async def handle(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        refused = gate.enter(method, context)
        if refused is not None:
            if isinstance(refused, QueueFullError):  # (never a client without its key)
                await draining.drain(requests)
            await refuse(context, method, refused, False)
            return
        try:

            async def parsed() -> AsyncIterator[Any]:
                """Each request as an `InferCall`, or the error that refused it."""
                async for data in requests:
                    try:
                        yield await reader.infer_request(data)
                    except InferdError as exc:
                        yield exc

            async for response in behavior(parsed(), context):
                yield response
        finally:
            gate.leave()

    return handle


@dataclass
class _Draining:
    """Streams refused at the call limit being drained now (at most `MAX_DRAINING_STREAMS`)."""

    streams: int = 0

    async def drain(self, requests: AsyncIterator[bytes]) -> None:
        """Reads, and drops unparsed, what a refused stream's client sends until it
        half-closes, for at most `REFUSED_STREAM_DRAIN_S` and `REFUSED_STREAM_DRAIN_BYTES`.
        A status sent while the client still writes ends its stream with RST_STREAM, and
        grpcio's asyncio client then reports its failed write, INTERNAL "Internal error from
        Core", in place of the status it received."""
        if self.streams >= MAX_DRAINING_STREAMS:
            return
        self.streams += 1
        received = 0

        async def until_half_closed() -> None:
            nonlocal received
            async for data in requests:
                received += len(data)
                if received > REFUSED_STREAM_DRAIN_BYTES:
                    return

        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until_half_closed(), REFUSED_STREAM_DRAIN_S)
        finally:
            self.streams -= 1
