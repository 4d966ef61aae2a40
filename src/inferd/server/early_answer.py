"""What the HTTP protocol (inferd.server.http_limits) asks of the early refusal
(inferd.server.shed) once a request's head is read: a refusal to answer there and then, or a
token for an admitted request, released when it is answered."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class Admitted(Protocol):
    def release(self) -> None: ...


class Refused(Protocol):
    """A request refused from its head: written by `render`, with the seconds it held the
    answer back (0 when it did not)."""

    pace_s: float
    """How long the client was told to wait (its `Retry-After`); 0: no pacing (a drain)."""

    def render(self, held_s: float) -> bytes: ...


EarlyAnswer = Callable[
    [bytes, bytes, Sequence[tuple[bytes, bytes]], bool, float, str | None],
    Refused | Admitted | None,
]
"""`(method, url, headers, keep_alive, received_at, peer address)` -> a refusal to answer on
the protocol's side, or a token released when the request is answered (or its connection
lost), or None."""
