"""Server-sent events: framing, and the response that streams them (no proxy buffering)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from inferd.server.disconnect import ClientDisconnected, cancel_on_disconnect

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    body = data if isinstance(data, bytes) else orjson.dumps(data)
    return head + b"data: " + body + b"\n\n"


class EventStream(StreamingResponse):
    """Ends its events as soon as the client goes away: a watcher on `receive` cancels the
    stream at once, and the events are closed (their `finally`: a generation cancelled,
    its KV rows freed at the next step) then, not when the garbage collector gets to them.
    (Starlette under ASGI 2.4 notices a gone client only when a send fails, and leaves the
    events' iterator to be collected.)"""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with cancel_on_disconnect(receive):
                await self.stream_response(send)
        except (ClientDisconnected, OSError):
            pass  # nobody to send anything to
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    return EventStream(events, media_type="text/event-stream", headers=HEADERS)
