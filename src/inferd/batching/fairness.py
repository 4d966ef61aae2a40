"""Fair shares of one queue between its clients: start-time fair queuing over rows.

Each queued item is ranked by its client's priority (higher first), then by a virtual start
tag: an item's tag is where its client's last item ended in virtual time, or the virtual time
now when the client had fallen behind, and it ends `rows / weight` later. Served in that
order, a client with weight w gets w / (sum of the queued clients' weights) of the rows while
others wait, however many it queues: a flood only lengthens its own wait. With one client
queued the order is the arrival order, and nothing here is asked.

A batch the fair order cannot interrupt: a light client's item that arrives while a heavy
client's batch runs waits for it whole. So while the queue is lopsided (one client holds
`LOPSIDED` times the rows of another, or did within `LOPSIDED_MEMORY_S`), batches are
cut to a slice of `SLICE_RUNS` runs of a request alone (the dispatch asks `slice_rows`; a
lighter client's batch takes its own queued rows at once, a slice at least): on a
CPU, whose run time grows with the rows, that costs the heavy client little of its throughput
(a row costs about the same in a batch of 4 as in one of 32) and spares the light one a
whole batch's wait; on a GPU, whose batches cost little more than one row, the slice holds
a full batch anyway. With several runtimes (instances), the heavy client's batches leave one
free meanwhile, so a light client's batch never shares the cores with all of the flood's.

The same tags say how much work is ahead of a new item of a given client
(`rows_ahead`): what admission weighs against the queue-time bound, so that a client that
floods is refused while a client within its share is still admitted.

Pure bookkeeping: no clock, no event loop, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.clients import Client, Priority

LOPSIDED = 4.0
"""A queue is lopsided when one client holds this many times the rows another holds, and at
least `HEAVY_ROWS`: a flood beside a steady client, not many clients with a few each."""
HEAVY_ROWS = 8
LOPSIDED_MEMORY_S = 1.0
"""Batches stay cut this long after the queue was last seen lopsided: the light client's
next item arrives while the heavy client's batch runs, and that batch was formed while the
heavy client was alone in the queue."""
EPSILON = 1e-9
"""Slack on virtual tags, sums of fractions of rows."""
SLICE_RUNS = 2.0
"""While the queue is lopsided, a batch takes at most this many lone runs' worth of rows."""


@dataclass
class _Queued:
    """One client's share of a queue: its rows queued, and where its last item ends."""

    weight: float
    priority: int
    rows: int = 0
    finish: float = 0.0


@dataclass(frozen=True, order=True)
class Rank:
    """An item's place in the fair order: smaller goes first."""

    precedence: int
    """The client's priority, negated (higher priority first)."""
    start: float
    """The virtual start tag."""


@dataclass
class FairShare:
    """The clients of one queue: their queued rows, weights and virtual tags."""

    clients: dict[str, _Queued] = field(default_factory=dict)
    virtual: float = 0.0
    """The virtual time: the start tag of the item served last."""
    lopsided_at: float = float("-inf")
    """When the queue was last seen lopsided (the dispatch's clock)."""

    @property
    def mixed(self) -> bool:
        """More than one client is queued: the fair order differs from arrival's."""
        return len(self.clients) > 1

    def queued(self, client: Client, rows: int) -> Rank:
        """Counts `rows` queued for `client`; the rank of the item that holds them."""
        state = self.clients.get(client.name)
        if state is None:
            state = _Queued(client.weight, int(client.priority), finish=self.virtual)
            self.clients[client.name] = state
        start = max(self.virtual, state.finish)
        state.finish = start + rows / state.weight
        state.rows += rows
        return Rank(-state.priority, start)

    def left(self, client: str, rows: int) -> None:
        """Counts `rows` of `client` off (served, expired, shed, gone)."""
        state = self.clients.get(client)
        if state is None:
            return
        state.rows -= rows
        if state.rows <= 0:
            del self.clients[client]

    def served(self, rank: Rank) -> None:
        """A batch started with the item of `rank` at its head."""
        self.virtual = max(self.virtual, rank.start)

    def slice_rows(self, now: float, lone_s: float | None, row_s: float | None) -> int | None:
        """The most rows the next batch may take (None: no cut): `SLICE_RUNS` lone runs
        (`lone_s`, a batch of one item) at `row_s` a row, while the queue is lopsided or was
        within `LOPSIDED_MEMORY_S`."""
        if self.mixed:
            rows = [s.rows for s in self.clients.values()]
            if max(rows) >= max(LOPSIDED * min(rows), HEAVY_ROWS):
                self.lopsided_at = now
        if now - self.lopsided_at > LOPSIDED_MEMORY_S or not lone_s or not row_s:
            return None
        return max(1, int(SLICE_RUNS * lone_s / row_s))

    def rows_of(self, client: str) -> int:
        """The rows `client` has queued."""
        state = self.clients.get(client)
        return 0 if state is None else state.rows

    def heaviest(self, client: str) -> bool:
        """Whether `client` holds the most queued rows (the flood, while the queue is
        lopsided: `slice_rows`)."""
        state = self.clients.get(client)
        return state is not None and all(s.rows <= state.rows for s in self.clients.values())

    def rows_ahead(self, client: Client) -> int:
        """About how many queued rows would be served before a new item of `client`: those
        of higher priority, and of each client of its priority the rows whose tags start no
        later than the new item's (a tie goes to the item queued first). A client's queued
        rows span its tags from `finish - rows / weight` to `finish`."""
        own = self.clients.get(client.name)
        start = self.virtual if own is None else max(self.virtual, own.finish)
        priority = int(client.priority) if own is None else own.priority
        ahead = 0
        for name, state in self.clients.items():
            if state.priority > priority or name == client.name:
                ahead += state.rows
            elif state.priority == priority:
                first = state.finish - state.rows / state.weight
                if first <= start:
                    ahead += min(state.rows, int((start - first) * state.weight + EPSILON) + 1)
        return ahead


__all__ = ["FairShare", "Priority", "Rank"]
