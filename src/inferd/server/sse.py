"""Server-sent events: framing, and the response that streams them (no proxy buffering)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from starlette.responses import StreamingResponse

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    body = data if isinstance(data, bytes) else orjson.dumps(data)
    return head + b"data: " + body + b"\n\n"


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream", headers=HEADERS)
