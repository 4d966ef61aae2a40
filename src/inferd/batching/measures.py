"""What a batcher measures of its load: its clock, the rate rows arrive at, and what batches
cost to run (moving averages, read by the dispatch policy and by admission's estimates)."""

from __future__ import annotations

import time

CLOCK = time.perf_counter
"""The clock of the batcher's durations: arrival gaps, queue waits, run times, cool-downs. Not
the event loop's `loop.time()`: uvloop's counts whole milliseconds and is read once per loop
turn, which made a 4 ms run measure anywhere from 3 to 5 (and the stage timings, the adaptive
wait and the arrival rate with it). Deadlines stay on the loop's clock, as its timers are."""
ALPHA = 0.2
"""Weight of a new measure in its moving average."""


class ArrivalRate:
    """Rows per second, an exponentially weighted moving average over inter-arrival gaps."""

    def __init__(self, alpha: float = ALPHA) -> None:
        self._alpha = alpha
        self._last: float | None = None
        self._gap_per_row: float | None = None

    def observe(self, now: float, rows: int) -> None:
        if self._last is not None:
            gap = max(now - self._last, 1e-6) / max(rows, 1)
            prev = self._gap_per_row
            self._gap_per_row = gap if prev is None else prev + self._alpha * (gap - prev)
        self._last = now

    def rows_per_s(self) -> float:
        return 0.0 if not self._gap_per_row else 1.0 / self._gap_per_row


DRAIN_WINDOW_S = 0.05
"""The drain rate is measured over windows of at least this long (a batch's answers come
together: a window must hold several)."""


class RunCosts:
    """Moving averages of batch run times, each None until its first measure."""

    def __init__(self) -> None:
        self.drain_row_s: float | None = None
        """Wall time per row answered while a queue stood: the queue's real drain, waits for
        the event loop and the machine's other work included (the run times leave them out)."""
        self._drain_since: float | None = None
        self._drain_rows = 0
        self.batch_s: float | None = None
        """Run time of a batch that succeeded."""
        self.lone_s: float | None = None
        """Run time of a batch of one item, whatever else ran beside it."""
        self.alone_s: float | None = None
        """Run time of a batch of one item while no other batch of its model ran: what a
        request costs on its own (under load, batches sharing the cores run longer, and a
        bound scaled on them would grow with the load it is there to shed)."""
        self.row_s: float | None = None
        """Run time of a batch per row it carried, of batches formed while more waited."""

    def batch_ran(self, items: int, run_s: float) -> None:
        """A batch of `items` items succeeded in `run_s`."""
        prev = self.batch_s
        self.batch_s = run_s if prev is None else prev + ALPHA * (run_s - prev)
        if items == 1:
            prev = self.lone_s
            self.lone_s = run_s if prev is None else prev + ALPHA * (run_s - prev)

    def ran_alone(self, run_s: float) -> None:
        """A batch of one item ran in `run_s` with no other batch of its model running."""
        prev = self.alone_s
        self.alone_s = run_s if prev is None else prev + ALPHA * (run_s - prev)

    def full_batch_ran(self, rows: int, run_s: float) -> None:
        """A batch formed while more items waited carried `rows` rows in `run_s`."""
        row_s = run_s / rows
        prev = self.row_s
        self.row_s = row_s if prev is None else prev + ALPHA * (row_s - prev)

    def answered(self, now: float, rows: int, backlogged: bool) -> None:
        """A batch of `rows` rows was answered at `now`; `backlogged`: items still waited.
        Between two answers while a queue stood the runtimes had work all along, so the rows
        over the time are the queue's drain."""
        if not backlogged:
            self._drain_since = None
            return
        if self._drain_since is None:
            self._drain_since, self._drain_rows = now, 0
            return
        self._drain_rows += rows
        elapsed = now - self._drain_since
        if elapsed < DRAIN_WINDOW_S:
            return
        sample = elapsed / self._drain_rows
        prev = self.drain_row_s
        self.drain_row_s = sample if prev is None else prev + ALPHA * (sample - prev)
        self._drain_since, self._drain_rows = now, 0
