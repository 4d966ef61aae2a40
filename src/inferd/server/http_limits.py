"""Bounds on a request's head (request line and headers), enforced in the HTTP protocol before
any of it reaches the app: its size, its header count, and the time to receive it.

uvicorn's httptools protocol puts no bound on a head: a 128 MB header took 27 s to parse (the
parser grows each header value chunk by chunk) and a 1 GB one held a core for minutes, with the
event loop, and so every probe, waiting. `bounded_protocol` makes a subclass that counts the
bytes received while a head is incomplete and the headers parsed; over either limit it answers
431 at once and closes the connection, and a head not complete within the time limit closes
it (408), which also ends slow-loris connections that trickle a head.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def _answer(status: int, reason: str, message: str) -> bytes:
    body = orjson.dumps({"error": message, "code": 4002, "request_id": ""})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def bounded_protocol(
    max_head_bytes: int, max_headers: int, head_timeout_s: float
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with these bounds on every request head."""

    class BoundedHttpTools(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_bytes = 0
            self._header_count = 0
            self._in_head = True
            self._served = False
            self._heads_done = 0
            """A request was answered on this connection (then an idle wait is keep-alive)."""
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._start_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            began_in_head, heads_before = self._in_head, self._heads_done
            super().data_received(data)  # a chunk is at most the transport's read size
            if (
                not (began_in_head and self._in_head)
                or self._heads_done != heads_before
                or self.transport.is_closing()
            ):
                # a body's bytes, or a head completed in this chunk (a whole small request,
                # its body, maybe the start of the next head: bounded by the chunk's size)
                return
            self._head_bytes += len(data)
            if self._head_bytes > max_head_bytes:
                self._refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"the request's head is over {max_head_bytes} bytes",
                )
            elif self._header_count > max_headers:
                self._refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"the request has over {max_headers} headers",
                )

        def on_header(self, name: bytes, value: bytes) -> None:
            self._header_count += 1
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self._header_count > max_headers:  # before the app ever sees it
                self._refuse(
                    431,
                    "Request Header Fields Too Large",
                    f"the request has over {max_headers} headers",
                )
                return
            self._in_head = False
            self._heads_done += 1
            self._stop_timer()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._served = True
            self._start_head()  # the next request on this connection

        def _start_head(self) -> None:
            self._head_bytes = 0
            self._header_count = 0
            self._in_head = True
            self._stop_timer()
            self._head_timer = self.loop.call_later(head_timeout_s, self._head_timed_out)

        def _stop_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self._in_head or self.transport.is_closing():
                return
            if self._head_bytes > 0:  # a head trickling in
                self._refuse(
                    408,
                    "Request Timeout",
                    f"the request's head did not arrive within {head_timeout_s:g} s",
                )
            elif not self._served:  # a connection that never sent a byte
                self.transport.close()
            # else: idle between requests, which uvicorn's keep-alive timeout ends

        def _refuse(self, status: int, reason: str, message: str) -> None:
            self._stop_timer()
            if not self.transport.is_closing():
                self.transport.write(_answer(status, reason, message))
                self.transport.close()

    return BoundedHttpTools
