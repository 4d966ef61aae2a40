"""Admission and shedding: which requests a batcher's queue takes, and which it answers early.

A request is refused as it arrives when the queue is full, when its deadline has passed or the
queued work would outlast it, or when the queued work ahead of it would take more than a share
of the queue-time bound; a client's item that waited past the bound is shed. A burst (fewer
than `QUEUE_TIME_MIN_ITEMS` requests queued) is never shed by queue time. Every refusal for
load carries a Retry-After estimate from the measured run times.

The work ahead of a request is its client's (`inferd.clients.current_client`): while other
clients are queued, it is what the fair order (inferd.batching.fairness) serves before it, so
a client that floods is refused for its own queue while one within its share is admitted.
The cost of that work is the queue's measured drain (`RunCosts.drain_row_s`: the time between
answers while a queue stood, so a busy event loop counts) or, until one is measured or when
it is lower, the runtime's measured cost of a row.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from inferd.batching.backlog import Backlog
from inferd.batching.measures import CLOCK, RunCosts
from inferd.batching.runtime_health import RuntimeHealth
from inferd.batching.settings import BatcherSettings
from inferd.clients import Client, current_client
from inferd.errors import DeadlineExceededError, DeadlineUnmetError, QueueFullError
from inferd.runtime.protocol import Feeds

ADMIT_SHARE = 0.8
"""An item is refused as it arrives when the queued work ahead of it would take more than this
share of `max_queue_time_s`: the estimate (the measured drain of a row) swings with the
batches' lengths and the machine's other work, and an item admitted that then waits past the
bound is refused only when it has spent it, the slow refusal the bound is there to avoid."""
QUEUE_TIME_FLOOR_RUNS = 16
"""The queue-time bound in force is never below this many runs of a request on its own (a
batch of one item, measured; the mean batch until one is): a queue of a few requests is a burst
the runtime clears in turn, not overload, and a model whose request alone takes a large share of
the configured bound (a slow model, large requests) would otherwise be shed at every burst.
Refusal on arrival then starts at half of it (`ADMIT_SHARE`), eight runs ahead. Not the mean
batch: under overload a fast model's batches are full and long, and a floor on them would lift
the bound as load grows, the opposite of shedding."""
QUEUE_TIME_MIN_ITEMS = 8
"""Shedding by queue time needs at least this many requests queued ahead: fewer is a burst
the runtime clears in turn, however large its requests (eight requests of a few thousand rows
each hold seconds of work and are still no standing queue)."""
SATURATION_PURGE_S = 0.01
"""How often `saturated` may purge a full queue of the items whose clients left."""


class Admission:
    """One batcher's admission and shedding, over its backlog and measured run costs."""

    def __init__(
        self,
        settings: BatcherSettings,
        backlog: Backlog,
        costs: RunCosts,
        health: RuntimeHealth,
    ) -> None:
        self._settings = settings
        self._backlog = backlog
        self._costs = costs
        self._health = health
        self._purged_at = 0.0

    @property
    def saturated(self) -> bool:
        """Whether one more item would be refused now for a full queue. Items whose clients
        left are purged at most every `SATURATION_PURGE_S` here (the queue is then full and
        this is asked for every request)."""
        limit = self._settings.max_queue_size
        if len(self._backlog.queue) < limit:
            return False
        now = time.monotonic()
        if now - self._purged_at >= SATURATION_PURGE_S:
            self._purged_at = now
            self._backlog.purge_done()
        return len(self._backlog.queue) >= limit

    def admit(
        self,
        parts: Sequence[tuple[Feeds, int]],
        deadline: float | None,
        now: float,
        background: bool,
    ) -> None:
        """Raises the refusal a request of `parts` arriving `now` gets, if any: a full queue,
        a deadline passed or one the queued work would outlast (the client's own bound, the
        more precise answer, DEADLINE_EXCEEDED over gRPC, so it comes before the queue-time
        bound), or the queue-time bound (`queue_time_refusal`; not for background work).
        `now` and `deadline` are on the event loop's clock."""
        backlog = self._backlog
        limit = self._settings.max_queue_size
        if len(backlog.queue) + len(parts) > limit:
            backlog.purge_done()
            if len(backlog.queue) + len(parts) > limit:
                raise QueueFullError(
                    f"the queue of this model is full ({limit} items)",
                    retry_after_s=self.retry_after_s(),
                )
        if deadline is not None:
            if deadline <= now:
                raise DeadlineExceededError("the request's deadline passed before it was queued")
            wait_s = self.expected_wait_s(sum(rows for _, rows in parts))
            if wait_s is not None and now + wait_s > deadline:
                raise DeadlineUnmetError(
                    f"the queue holds about {wait_s * 1000:.0f} ms of work, more than this "
                    f"request's deadline allows ({(deadline - now) * 1000:.0f} ms)",
                    retry_after_s=wait_s,
                )
        if not background:
            overdue = self.queue_time_refusal(0, current_client())
            if overdue is not None:
                raise overdue

    def queue_wait_s(self, ahead: int) -> float | None:
        """How long an item arriving now would wait in the queue with `ahead` rows before it:
        their share of the runtimes at the measured cost of a queued row, plus a whole batch
        when every runtime is busy (the one it waits for to finish). None until a batch
        formed under load has been measured."""
        costs = self._costs
        row_s, batch_s = costs.row_s, costs.batch_s
        if row_s is None or batch_s is None:
            return None
        concurrency = self._settings.concurrency
        busy = batch_s if self._backlog.running >= concurrency else 0.0
        run_s = ahead * row_s / concurrency
        if costs.drain_row_s is not None:  # (what the runtimes cost, and what else slows them)
            run_s = max(run_s, ahead * costs.drain_row_s)
        return run_s + busy

    def queue_time_bound_s(self) -> float | None:
        """The queue-time bound in force: `max_queue_time_s`, or `QUEUE_TIME_FLOOR_RUNS`
        measured runs of a request alone (with no other batch running; until one has, the
        queue's drain a row, a lone request's run or the mean batch's) when that is longer;
        None when there is no bound, or no run has been measured yet (nothing says yet how
        long a burst of this model takes: the first batch of a slow model may hold the first
        arrivals past the bound)."""
        bound = self._settings.max_queue_time_s
        costs = self._costs
        measures = (costs.alone_s, costs.drain_row_s, costs.lone_s, costs.batch_s)
        run_s = next((s for s in measures if s), None)
        if bound is None or run_s is None:
            return None
        return max(bound, QUEUE_TIME_FLOOR_RUNS * run_s)

    def queue_time_refusal(
        self, arriving: int = 0, client: Client | None = None
    ) -> QueueFullError | None:
        """The 4290 an item arriving now gets because the queued work ahead of it would take
        longer than `ADMIT_SHARE` of the bound in force (`queue_time_bound_s`), or the oldest
        queued item has waited that long already (None when neither, or there is no bound):
        `arriving`, the requests to this queue read and not answered yet, count ahead of it
        beside those queued (less those running). Never with fewer than
        `QUEUE_TIME_MIN_ITEMS` requests ahead of it (`arriving` counts the arriving one and
        those running). The item is `client`'s (None: the current client's): while other
        clients are queued, the work ahead of it is what the fair order serves first."""
        bound = self.queue_time_bound_s()
        if bound is None:
            return None
        backlog = self._backlog
        client = client if client is not None else current_client()
        fair = backlog.fair
        if fair.clients and (fair.mixed or client.name not in fair.clients):
            # others are queued: its own share of the work ahead, not the oldest's wait
            ahead = fair.rows_ahead(client)
            if ahead < QUEUE_TIME_MIN_ITEMS:
                return None
            wait_s = self.queue_wait_s(ahead)
        else:
            items_ahead = max(backlog.queued_requests, arriving - 1 - backlog.running)
            if items_ahead < QUEUE_TIME_MIN_ITEMS:
                return None
            ahead = max(backlog.queued_rows, arriving - backlog.running_rows)
            wait_s = self.queue_wait_s(ahead)
            if backlog.queue:  # what the oldest has waited already: the estimate's floor
                oldest_s = CLOCK() - backlog.queue[0].enqueued_at
                wait_s = oldest_s if wait_s is None else max(wait_s, oldest_s)
        if wait_s is None or wait_s <= bound * ADMIT_SHARE:
            return None
        return QueueFullError(
            f"the queue of model '{self._settings.model}' holds about {wait_s * 1000:.0f} ms "
            f"of work ahead of this request, more than its bound of {bound * 1000:.0f} ms "
            "admits; retry later",
            retry_after_s=wait_s - bound * ADMIT_SHARE,
        )

    def shed_overdue(self, now: float) -> float | None:
        """Answers 4290 to the client items that waited longer than the bound in force; the
        seconds until the next one would, or None (no bound, or fewer than
        `QUEUE_TIME_MIN_ITEMS` queued: a burst is served in turn)."""
        bound = self.queue_time_bound_s()
        if bound is None or self._backlog.queued_requests < QUEUE_TIME_MIN_ITEMS:
            return None
        for entry in self._backlog.queue:
            waited = now - entry.enqueued_at
            if waited <= bound:
                return bound - waited
            if entry.background or entry.future.done():
                continue
            entry.fail(
                QueueFullError(
                    f"the request waited {waited * 1000:.0f} ms in the queue of model "
                    f"'{self._settings.model}', over its bound of {bound * 1000:.0f} ms; "
                    "retry later",
                    retry_after_s=self.retry_after_s(),
                )
            )
        return None

    def expected_wait_s(self, rows: int) -> float | None:
        """How long `rows` more rows would take to be answered, from the measured batch time:
        the batches queued ahead of them plus their own, over the runtime's concurrency.
        None until a batch has been measured."""
        per_batch = self._costs.batch_s
        if per_batch is None:
            return None
        size = max(self._health.limit, 1)
        batches = math.ceil((self._backlog.queued_rows + rows) / size)
        return per_batch * batches / self._settings.concurrency

    def retry_after_s(self) -> float:
        """When a refused client may try again: the batches queued now, at the measured
        batch time (a second at least)."""
        per_batch = self._costs.batch_s or 0.1
        size = max(self._settings.max_batch_size, 1)
        batches_ahead = math.ceil(self._backlog.queued_rows / size) / self._settings.concurrency
        return max(1.0, per_batch * batches_ahead)
