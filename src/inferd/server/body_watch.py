"""A request body's arrival on one connection, watched: a body that stops arriving for the
watch's timeout is ended with a 408 (its connection closed), so that a client that sends a
head and then trickles or withholds its body does not hold a connection, or the app's read
of it, for ever (inferd.server.http_limits starts the watch with the body's first bytes)."""

from __future__ import annotations

import asyncio
from typing import Protocol


class Watched(Protocol):
    """The connection whose request body is watched."""

    loop: asyncio.AbstractEventLoop

    def awaits_body(self) -> bool:
        """Whether the request's body is still arriving."""

    def end_body(self, status: int, reason: str, message: str, code: int) -> None:
        """Ends the request whose body has not all arrived."""

    def closing(self) -> bool:
        """Whether the connection is closing already."""


class BodyWatch:
    __slots__ = ("_at", "_conn", "_timeout_s", "_timer")

    def __init__(self, conn: Watched, timeout_s: float) -> None:
        self._conn = conn
        self._timeout_s = timeout_s
        self._timer: asyncio.TimerHandle | None = None
        self._at = 0.0
        """When the body's last bytes arrived (while it is watched)."""

    def arrived(self) -> None:
        """Bytes of the body arrived: the watch starts, or the quiet it measures begins anew."""
        self._at = self._conn.loop.time()
        if self._timer is None:
            self._timer = self._conn.loop.call_later(self._timeout_s, self._timed_out)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        conn = self._conn
        if not conn.awaits_body() or conn.closing():
            return
        quiet_s = conn.loop.time() - self._at
        if quiet_s < self._timeout_s:  # bytes came meanwhile: wait out the rest
            self._timer = conn.loop.call_later(self._timeout_s - quiet_s, self._timed_out)
            return
        conn.end_body(
            408,
            "Request Timeout",
            f"the request's body stopped arriving for {self._timeout_s:g} s",
            4002,
        )
