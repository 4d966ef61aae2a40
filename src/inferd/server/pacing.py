"""Pacing clients that retry before their `Retry-After`: one `Pacer` a connection.

A refusal tells its client when to come back (`Retry-After`). A connection that sends again
sooner and is refused again has its refusal held back until then, and each time it does so
again in a row, longer past then (one `Retry-After` more, then three, up to `HOLD_MAX_S`): a
client that retries at once, ignoring the header, is paced to one refusal every few seconds
at the cost of a timer, instead of a refusal as fast as it can send (each cheap, together
the whole core the refusals are there to protect). A client that waits as told is answered at
once, every time, and is forgiven what it did before.

The HTTP protocol (inferd.server.http_limits) holds the refusals it makes from a request's
head; the connection's `Pacer` rides in the request's scope (`PACER`), so that the app holds
its own 429s alike (inferd.server.observe).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

PACE_MAX_S = 1.0
"""The longest wait a refusal paces its client to (`Pacer`): a longer `Retry-After` still says
when the client should come back, but a connection back after this long is answered at once."""
HOLD_MAX_S = 4.0
"""The longest a paced refusal is held back (`Pacer`): a closed-loop client that ignores
`Retry-After` gets a refusal every 4 s a connection, a quarter of what one held a second
(benchmarks/overload_bench.py: 1,000 such clients cost the server's core a thousand refusals a
second held for 1 s)."""
PACER = "inferd.pacer"
"""Scope extension: the connection's `Pacer`, for refusals the app makes (its 429s)."""


class Pacer:
    """One connection's pacing: until when its last refusal told its client to wait.
    `release`: called before the app holds a refusal back (the request stops counting as
    arriving for its model: inferd.server.shed)."""

    __slots__ = ("quiet_until", "release", "strikes")

    def __init__(self, release: Callable[[], None] = lambda: None) -> None:
        self.quiet_until = 0.0
        self.release = release
        self.strikes = 0
        """Refusals in a row this connection came back for before its wait was over."""

    def hold_s(self, pace_s: float, now: float | None = None) -> float:
        """How long a refusal that tells its client to wait `pace_s` is held back now: 0 when
        the client waited as told; when it came back sooner, until its last wait is over, and
        past that by `pace_s` times 0, 1, 3, 7... for each time in a row it did (at most
        `HOLD_MAX_S` in all). The client is then told to wait `pace_s` more (at most
        `PACE_MAX_S` counts)."""
        now = time.perf_counter() if now is None else now
        if pace_s <= 0:
            self.quiet_until = now
            return 0.0
        pace_s = min(pace_s, PACE_MAX_S)
        early_s = self.quiet_until - now
        if early_s > 0:
            self.strikes = min(self.strikes + 1, 16)
            hold_s = min(early_s + pace_s * ((1 << (self.strikes - 1)) - 1), HOLD_MAX_S)
        else:
            self.strikes = 0
            hold_s = 0.0
        self.quiet_until = now + hold_s + pace_s
        return hold_s


def pacer_of(scope: Mapping[str, Any]) -> Pacer | None:
    pacer = scope.get("extensions", {}).get(PACER)
    return pacer if isinstance(pacer, Pacer) else None
