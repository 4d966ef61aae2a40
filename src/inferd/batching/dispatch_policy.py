"""When a batcher's next batch forms, and which queued items it takes.

When, re-evaluated whenever a request arrives or a batch finishes:
- nothing runs and a slot is free: dispatch at once (a lone request never waits);
- the queued rows reach max_batch_size or a preferred size: dispatch at once;
- a batch is running and another slot is free: wait for more requests only while the measured
  arrival rate says the batch would fill within the oldest request's remaining
  `max_queue_delay`; otherwise dispatch now, as waiting would add latency and no rows;
- every slot is busy: requests accumulate, and the next batch forms when a slot frees.

Which: the oldest live item and those that may share its batch (inferd.batching.formation),
or, while several clients are queued, the first live item in their fair order
(inferd.batching.fairness) and those that may share its batch among the next in that order
(cut to a slice while one client holds most of the queue, and then that client's batches
leave one runtime free for the others' and run below them, yielding the cores),
under the batch size limit (inferd.batching.runtime_health), the learned token cap
(inferd.batching.sizing) and, for instances on the CPU, a runtime's share of the queued
rows (`BatcherSettings.queue_lanes`); background items never share a batch with clients'
items.
"""

from __future__ import annotations

import heapq

from inferd.batching.backlog import Backlog, Entry
from inferd.batching.fairness import Rank
from inferd.batching.formation import select_batch
from inferd.batching.layout import BatchLayout
from inferd.batching.measures import CLOCK, ArrivalRate, RunCosts
from inferd.batching.runtime_health import RuntimeHealth
from inferd.batching.settings import BatcherSettings
from inferd.batching.sizing import BatchSizer


class DispatchPolicy:
    """One batcher's dispatch decisions, over its backlog (see the module's docstring)."""

    def __init__(
        self,
        layout: BatchLayout,
        settings: BatcherSettings,
        backlog: Backlog,
        arrivals: ArrivalRate,
        health: RuntimeHealth,
        sizer: BatchSizer,
        costs: RunCosts,
    ) -> None:
        self._layout = layout
        self._settings = settings
        self._backlog = backlog
        self._arrivals = arrivals
        self._health = health
        self._sizer = sizer
        self._costs = costs

    def wait_s(self, now: float) -> float:
        """Seconds to wait before dispatching the queued items; 0 to dispatch now."""
        settings = self._settings
        backlog = self._backlog
        if backlog.running == 0 or not self._layout.batched or settings.max_batch_size <= 0:
            return 0.0
        queued = backlog.queued_rows
        if queued >= self._health.limit or queued in settings.preferred_batch_sizes:
            return 0.0
        remaining = settings.max_queue_delay_s - (now - backlog.queue[0].enqueued_at)
        if remaining <= 0:
            return 0.0
        rate = self._arrivals.rows_per_s()
        if rate <= 0:
            return 0.0
        fill_s = (settings.max_batch_size - queued) / rate
        return fill_s if fill_s <= remaining else 0.0

    def next_batch(self) -> tuple[list[Entry], bool, bool]:
        """The next batch, taken off the queue (none when only background items wait and no
        runtime is theirs to take), whether its run time teaches the sizer (a client batch
        formed while every other runtime is busy and more items wait), and whether it yields
        the cores (a batch of the client that floods the queue while lighter ones wait:
        inferd.runtime.priority's `YIELDING_NICENESS`)."""
        settings = self._settings
        backlog = self._backlog
        candidates = self._candidates(max(settings.max_batch_size, 1) * settings.scan_window)
        if not candidates:
            backlog.purge_done()
            return [], False, False
        # background items (shadow traffic, jobs) never share a batch with, nor go before,
        # the clients waiting: they run alone, when no client's item waits
        foreground = [e for e in candidates if not e.background]
        if foreground:
            candidates = foreground
        elif backlog.running > backlog.background_running:
            return [], False, False  # a client's batch runs: background work waits
        elif backlog.background_running >= max(1, settings.concurrency - 1):
            return [], False, False  # one runtime stays free for the next client's batch
        else:
            # one item at a time: a client arriving meanwhile shares the cores with little
            candidates = candidates[:1]
        now = CLOCK()
        max_rows = self._health.current_limit(now) if self._layout.batched else 0
        cut = backlog.fair.slice_rows(now, self._costs.lone_s, self._costs.row_s)
        head = candidates[0].client
        flood = cut is not None and bool(foreground) and backlog.fair.heaviest(head)
        if cut is not None and max_rows > 0:
            # the flood's batch, a slice; a lighter client's, its own queued rows at once
            # (in one run rather than a slice at a time, each behind the flood's batches),
            # and none of the flood's: on a CPU each row it carried would lengthen its run
            own = 0 if flood else backlog.fair.rows_of(head)
            max_rows = min(max_rows, max(cut, own))
            if not flood:
                heavy = {c for c in {e.client for e in candidates} if backlog.fair.heaviest(c)}
                candidates = [e for e in candidates if e.client not in heavy]
        if flood and settings.concurrency > 1 and backlog.running >= settings.concurrency - 1:
            return [], False, False  # one runtime stays free for a light client's next batch
        if settings.queue_lanes > 1 and max_rows > 0 and foreground and backlog.running:
            # (a batch alone takes the queue: the runtime's solo session has every core)
            max_rows = min(max_rows, -(-backlog.queued_rows // settings.queue_lanes))
        measured = (
            settings.learn_batch_tokens
            and max_rows > 0
            and bool(foreground)
            and len(candidates) > 1
            and backlog.running >= settings.concurrency - 1
        )
        chosen = select_batch(
            candidates,
            max_rows,
            settings.max_padding_waste,
            self._sizer.next_cap() if measured else self._sizer.cap_tokens,
            settings.length_grouping,
        )
        batch = [candidates[i] for i in chosen]
        backlog.take(batch)
        backlog.fair.served(batch[0].rank)
        return batch, measured, flood

    def _candidates(self, window: int) -> list[Entry]:
        """Up to `window` live queued items: the first in arrival order, or, while several
        clients are queued, the first in their fair order."""
        backlog = self._backlog
        if backlog.fair.mixed:
            live = (e for e in backlog.queue if not e.future.done())
            return heapq.nsmallest(window, live, key=_rank)
        candidates: list[Entry] = []
        for entry in backlog.queue:
            if len(candidates) >= window:
                break
            if not entry.future.done():
                candidates.append(entry)
        return candidates


def _rank(entry: Entry) -> Rank:
    return entry.rank
