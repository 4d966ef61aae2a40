"""Pure ASGI middleware: request ids, the body size limit, and the last catch of an
unexpected exception (cheaper than BaseHTTPMiddleware)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.errors import ErrorCode
from inferd.observability.trace import current_trace
from inferd.server.error_answers import PayloadTooLargeError, error_response

log = logging.getLogger(__name__)
_GOOD_ID = re.compile(rb"^[A-Za-z0-9._:\-]{1,128}$")


def request_id_from(headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The request's `X-Request-ID` when it is sane, else a new one."""
    for name, value in headers:
        if name == b"x-request-id":
            if _GOOD_ID.match(value):
                return value
            break
    return os.urandom(12).hex().encode()


class RequestIdMiddleware:
    """Takes `X-Request-ID` when it is sane, else makes one; stores it and echoes it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope["headers"])
        scope.setdefault("state", {})["request_id"] = request_id.decode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id)]
            await send(message)

        await self.app(scope, receive, send_with_id)


class BodyLimitMiddleware:
    """413 (code 4002) for a body over `max_bytes`, declared or streamed; on the text routes
    (`text_paths`), over `text_max_bytes`. A text request is bounded by its characters
    (`tokenizer.max_request_chars`), so a body far larger cannot be valid: it is refused from
    its head, before it is read and parsed (parsing tens of megabytes of JSON holds the event
    loop for longer than a health probe may wait)."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        text_max_bytes: int | None = None,
        text_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.text_max_bytes = (
            max_bytes if text_max_bytes is None else min(text_max_bytes, max_bytes)
        )
        self.text_paths = text_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.text_max_bytes if scope.get("path") in self.text_paths else self.max_bytes
        scope.setdefault("state", {})["body_limit"] = limit  # (an inflated body's bound too)
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:
                    request_id = str(scope.get("state", {}).get("request_id", ""))
                    response = error_response(
                        413, 4002, _message(limit), request_id, path=scope.get("path", "")
                    )
                    await response(scope, receive, send)
                    return
                break
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLargeError(_message(limit))
            return message

        await self.app(scope, limited_receive, send)


def _message(limit: int) -> str:
    return f"request body over the limit of {limit} bytes"


class CatchAllMiddleware:
    """No exception leaves inferd's handling: one that nothing else answered is logged with
    the request id and answered 500 (code 5000, the request id in the body), and the
    connection stays usable (Starlette's own last handler answers, then raises on to the
    server, which closes the connection without saying so: a pooling client's next request
    on it fails). When the answer had already started, it cannot be replaced: its body is cut
    short and the server closes the connection, the only signal HTTP/1.1 has left then."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_and_watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        except Exception as exc:
            request_id = str(scope.get("state", {}).get("request_id", ""))
            log.error("unhandled error", exc_info=exc, extra={"request_id": request_id})
            if started:
                return  # (the server closes the connection of an unfinished answer)
            current_trace().error_code = int(ErrorCode.INTERNAL)
            response = error_response(
                500,
                int(ErrorCode.INTERNAL),
                f"internal error; the server log has the details under request id {request_id}",
                request_id,
                path=scope.get("path", ""),
            )
            await response(scope, receive, send)
