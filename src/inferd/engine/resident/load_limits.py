"""How many on-demand model loads each client may cause: a token bucket per client.

A request that makes an on-demand version load (none resident, none loading) takes a token
from its client's bucket (inferd.clients: an API key's client, or a peer address's); with none
left it is refused 429 (code 4291) with the `Retry-After` of the next token. A request whose
version is resident, or already loading, takes nothing. Each bucket holds `load_burst` tokens
and gains `loads_per_minute / 60` a second; the client's own settings (its key's line) win
over the server's (`client_loads_per_minute`, `client_load_burst`); a rate of 0 is no limit.

Runs on the event loop only: no locks. The clock is injected (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from inferd.clients import Client
from inferd.errors import TooManyLoadsError

MAX_BUCKETS = 10_000
"""Past this many clients, the buckets that have refilled are forgotten (a full bucket is the
same as none): addresses cannot grow the table without bound while they stay polite."""


@dataclass
class _Bucket:
    tokens: float
    at: float
    per_s: float
    burst: int

    def refill(self, now: float) -> None:
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.per_s)
        self.at = now


class LoadLimits:
    def __init__(
        self,
        loads_per_minute: float,
        load_burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`loads_per_minute`, `load_burst`: a client's when its key sets none (0 loads a
        minute: no limit)."""
        self.loads_per_minute = loads_per_minute
        self.load_burst = load_burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self.refused = 0

    def take(self, client: Client, what: str) -> None:
        """Counts a load of `what` (a version, as messages name it) against `client`;
        TooManyLoadsError (4291) when its bucket is empty."""
        per_minute, burst = self.limits_of(client)
        if per_minute <= 0:
            return
        now = self._clock()
        bucket = self._buckets.get(client.name)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._forget_full(now)
            bucket = _Bucket(float(burst), now, per_minute / 60.0, burst)
            self._buckets[client.name] = bucket
        else:
            bucket.refill(now)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return
        self.refused += 1
        wait_s = (1.0 - bucket.tokens) / bucket.per_s
        raise TooManyLoadsError(
            f"{what} is not in memory, and loading it would exceed the on-demand loads "
            f"allowed to client '{client.name}' ({per_minute:g} a minute, {burst} at once); "
            f"retry in {wait_s:.1f} s, or use a model in memory",
            retry_after_s=wait_s,
        )

    def limits_of(self, client: Client) -> tuple[float, int]:
        """The client's loads a minute and burst: its own where its key sets them."""
        per_minute = (
            client.loads_per_minute
            if client.loads_per_minute is not None
            else self.loads_per_minute
        )
        burst = client.load_burst if client.load_burst is not None else self.load_burst
        return per_minute, burst

    def _forget_full(self, now: float) -> None:
        for name, bucket in list(self._buckets.items()):
            bucket.refill(now)
            if bucket.tokens >= bucket.burst:
                del self._buckets[name]
