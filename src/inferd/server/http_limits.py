"""Bounds on a request's head (request line and headers), enforced in the HTTP protocol before
any of it reaches the app: its size, its header count, and the time to receive it.

uvicorn's httptools protocol puts no bound on a head: a 128 MB header took 27 s to parse (the
parser grows each header value chunk by chunk) and a 1 GB one held a core for minutes, with the
event loop, and so every probe, waiting. `bounded_protocol` makes a subclass that counts the
bytes received while a head is incomplete and the headers parsed; over either limit it answers
431 at once and closes the connection, and a head not complete within the time limit closes
it (408), which also ends slow-loris connections that trickle a head. A body that stops
arriving for `body_timeout_s` is answered 408 and its connection closed; one still arriving
when the server drains is answered 5030 (it cannot finish without its client).

The same protocol stamps when each request began to arrive (`received_at`, what `Server-Timing`
and the latency metrics count from) and, given an `early` hook (inferd.server.shed), answers
there and then a request the hook refuses from its head alone, skipping its body and keeping
the connection open.

A refusal from the head is paced as `inferd.server.pacing` says: a connection back before its
`Retry-After` has its refusal held back (a timer), its body skipped meanwhile. The
connection's `Pacer` is in the request's scope (`PACER`), so that the app paces its own 429s
alike (inferd.server.observe).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import orjson

from inferd.compat.uvicorn_http import HttpToolsProtocol, RequestResponseCycle
from inferd.errors import error_body
from inferd.server.body_watch import BodyWatch
from inferd.server.coalesce import CoalescedWrites
from inferd.server.early_answer import Admitted, EarlyAnswer, Refused
from inferd.server.pacing import PACER, Pacer

log = logging.getLogger(__name__)

RECEIVED = "inferd.received"
"""Scope extension: `{"at": time.perf_counter()}` when the request's first byte was parsed."""


def received_at(scope: Mapping[str, Any]) -> float | None:
    at = scope.get("extensions", {}).get(RECEIVED, {}).get("at")
    return float(at) if at is not None else None


def _answer(status: int, reason: str, message: str, code: int = 4002) -> bytes:
    body = orjson.dumps(error_body(code, message, ""))
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


@dataclass(frozen=True)
class HttpLimits:
    max_head_bytes: int
    max_headers: int
    head_timeout_s: float
    early: EarlyAnswer | None = None
    body_timeout_s: float = 30.0


def bounded_protocol(
    max_head_bytes: int,
    max_headers: int,
    head_timeout_s: float,
    early: EarlyAnswer | None = None,
    body_timeout_s: float = 30.0,
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with these bounds on every request head and body, and
    `early` asked about every request before the app is."""
    limits = HttpLimits(max_head_bytes, max_headers, head_timeout_s, early, body_timeout_s)
    return type("BoundedHttpTools", (BoundedHttpTools,), {"limits": limits})


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with `limits` on every request head and body, and
    `limits.early` asked about every request before the app is (`bounded_protocol` makes one
    with its limits)."""

    limits: ClassVar[HttpLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._header_count = 0
        self._in_head = True
        self._served = False
        self._heads_done = 0
        """A request was answered on this connection (then an idle wait is keep-alive)."""
        self._head_timer: asyncio.TimerHandle | None = None
        self._received_at = 0.0
        self._admitted: Admitted | None = None
        self._body = BodyWatch(self, self.limits.body_timeout_s)
        self._pacer = Pacer(self._release)
        self._held: tuple[Refused, bool, float, asyncio.TimerHandle] | None = None
        """A paced refusal not yet written: itself, keep-alive, when it was held, its timer."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # a response's head and body in one send (inferd.server.coalesce)
        super().connection_made(CoalescedWrites(transport, self.loop))
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._held is not None:
            self._held[3].cancel()
            self._held = None
        self._stop_timer()
        self._body.stop()
        self._release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        began_in_head, heads_before = self._in_head, self._heads_done
        super().data_received(data)  # a chunk is at most the transport's read size
        if not self._in_head and self.awaits_body():
            self._body.arrived()
        if (
            not (began_in_head and self._in_head)
            or self._heads_done != heads_before
            or self.transport.is_closing()
        ):
            # a body's bytes, or a head completed in this chunk (a whole small request,
            # its body, maybe the start of the next head: bounded by the chunk's size)
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.limits.max_head_bytes:
            self._refuse(
                431,
                "Request Header Fields Too Large",
                f"the request's head is over {self.limits.max_head_bytes} bytes",
            )
        elif self._header_count > self.limits.max_headers:
            self._refuse(
                431,
                "Request Header Fields Too Large",
                f"the request has over {self.limits.max_headers} headers",
            )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # when the server began to read the request: what `Server-Timing` and the latency
        # metrics count from, so time spent waiting for the event loop is counted too
        self._received_at = time.perf_counter()
        extensions: dict[str, Any] = {
            RECEIVED: {"at": self._received_at},
            PACER: self._pacer,
        }
        self.scope["extensions"] = extensions

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._header_count > self.limits.max_headers:  # before the app ever sees it
            self._refuse(
                431,
                "Request Header Fields Too Large",
                f"the request has over {self.limits.max_headers} headers",
            )
            return
        self._in_head = False
        self._heads_done += 1
        self._stop_timer()
        if self._held is not None:  # a pipelined request: the held answer goes first
            self._write_held()
        early = self.limits.early
        if early is not None and (self.cycle is None or self.cycle.response_complete):
            # (a pipelined request waits its turn, and so goes to the app)
            keep_alive = (
                self.parser.get_http_version() != "1.0"
                and self.parser.should_keep_alive()
                and not self.expect_100_continue  # its body may never come: close
            )
            try:
                answer = early(
                    self.parser.get_method(),
                    self.url,
                    self.headers,
                    keep_alive,
                    self._received_at,
                    self.client[0] if self.client else None,
                )
            except Exception:  # a fault here must not cost the request: the app decides
                log.exception("the early refusal check failed; the app answers instead")
                answer = None
            if answer is not None and hasattr(answer, "render"):
                self._refused(cast(Refused, answer), keep_alive)
                return
            self._admitted = answer
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self._release()
        super().on_response_complete()

    def _release(self) -> None:
        if self._admitted is not None:
            self._admitted.release()
            self._admitted = None

    def _refused(self, refusal: Refused, keep_alive: bool) -> None:
        """Answers a refusal now, or holds it until the client's last `Retry-After` is
        over when it came back sooner (see the module's docstring)."""
        now = time.perf_counter()
        hold_s = self._pacer.hold_s(refusal.pace_s, now)
        if hold_s <= 0 or not keep_alive:
            self._answer_now(refusal.render(0.0), keep_alive)
            return
        self._finish_cycle(keep_alive)  # its body is skipped meanwhile
        timer = self.loop.call_later(hold_s, self._write_held)
        self._held = (refusal, keep_alive, now, timer)

    def _write_held(self) -> None:
        if self._held is None:
            return
        refusal, keep_alive, since, timer = self._held
        self._held = None
        timer.cancel()
        if self.transport.is_closing():
            return
        self._write_answer(refusal.render(time.perf_counter() - since), keep_alive)

    def _finish_cycle(self, keep_alive: bool) -> None:
        # a finished cycle stands for the request, so that uvicorn skips its body and
        # serves the next request on the connection as after any answer
        self.cycle = RequestResponseCycle(
            scope=self.scope,
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=keep_alive,
            on_response=self.on_response_complete,
        )
        self.cycle.response_complete = True

    def _answer_now(self, answer: bytes, keep_alive: bool) -> None:
        self._finish_cycle(keep_alive)
        self._write_answer(answer, keep_alive)

    def _write_answer(self, answer: bytes, keep_alive: bool) -> None:
        status_line, rest = answer.split(b"\r\n", 1)
        defaults = b"".join(n + b": " + v + b"\r\n" for n, v in self.server_state.default_headers)
        close = b"" if keep_alive else b"connection: close\r\n"
        self.transport.write(status_line + b"\r\n" + defaults + close + rest)
        if keep_alive:
            self.on_response_complete()
        else:
            self.transport.close()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body.stop()
        self._served = True
        self._start_head()  # the next request on this connection

    def _start_head(self) -> None:
        self._head_bytes = 0
        self._header_count = 0
        self._in_head = True
        self._stop_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

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
                f"the request's head did not arrive within {self.limits.head_timeout_s:g} s",
            )
        elif not self._served:  # a connection that never sent a byte
            self.transport.close()
        # else: idle between requests, which uvicorn's keep-alive timeout ends

    def awaits_body(self) -> bool:
        return self.cycle is not None and self.cycle.more_body

    def closing(self) -> bool:
        return self.transport.is_closing()

    def end_body(self, status: int, reason: str, message: str, code: int) -> None:
        """Answers a request whose body has not all arrived (unless its answer has begun)
        and closes the connection; the app's read of the body ends as a disconnect."""
        assert self.cycle is not None
        if self.cycle.response_started or self.cycle.response_complete:
            self.transport.close()
        else:
            self._refuse(status, reason, message, code)

    def shutdown(self) -> None:
        self._write_held()  # a held refusal is answered before the connection closes
        if self.awaits_body() and not self.transport.is_closing():
            self._body.stop()
            self.end_body(
                503,
                "Service Unavailable",
                "the server is shutting down; the request's body had not all arrived",
                5030,
            )
            return
        super().shutdown()

    def _refuse(self, status: int, reason: str, message: str, code: int = 4002) -> None:
        self._stop_timer()
        if not self.transport.is_closing():
            self.transport.write(_answer(status, reason, message, code))
            self.transport.close()
