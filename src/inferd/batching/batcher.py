"""`DynamicBatcher`: a bounded queue of requests in front of a runtime, dispatched in batches.

Dispatch policy, re-evaluated whenever a request arrives or a batch finishes:
- nothing runs and a slot is free: dispatch at once (a lone request never waits);
- the queued rows reach max_batch_size or a preferred size: dispatch at once;
- a batch is running and another slot is free: wait for more requests only while the measured
  arrival rate says the batch would fill within the oldest request's remaining
  `max_queue_delay`; otherwise dispatch now, as waiting would add latency and no rows;
- every slot is busy: requests accumulate, and the next batch forms when a slot frees.

Every admitted request owns futures that every path resolves: result, batch error, deadline,
cancellation by its caller, drain and close.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from inferd.batching.formation import (
    Signature,
    max_extent,
    padding_counts,
    select_batch,
    signature,
    token_cost,
)
from inferd.batching.layout import BatchLayout
from inferd.batching.padding import concat_chunks, merge_feeds, split_outputs
from inferd.batching.sizing import BatchSizer
from inferd.errors import (
    DeadlineExceededError,
    DeadlineUnmetError,
    ErrorCode,
    InferdError,
    InternalError,
    OutOfMemoryError,
    QueueFullError,
    UnavailableError,
)
from inferd.observability.observer import Observer, notify
from inferd.runtime import priority
from inferd.runtime.protocol import Array, Feeds

ADMIT_SHARE = 0.5
"""An item is refused as it arrives when the queued work ahead of it would take more than this
share of `max_queue_time_s`: the estimate (the measured cost of a row) swings with the batches'
lengths and the machine's other work, and an item admitted that then waits past the bound is
refused only when it has spent it, the slow refusal the bound is there to avoid."""
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
CLOCK = time.perf_counter
"""The clock of the batcher's durations: arrival gaps, queue waits, run times, cool-downs. Not
the event loop's `loop.time()`: uvloop's counts whole milliseconds and is read once per loop
turn, which made a 4 ms run measure anywhere from 3 to 5 (and the stage timings, the adaptive
wait and the arrival rate with it). Deadlines stay on the loop's clock, as its timers are."""

log = logging.getLogger(__name__)

RunBatch = Callable[[dict[str, Array]], Awaitable[dict[str, Array]]]


@dataclass(frozen=True)
class BatcherSettings:
    """How one version's batcher behaves. Its values come from the model's configuration (the
    engine builds them from `dynamic_batching`, whose defaults are the only ones); the batcher
    restates none of them."""

    max_batch_size: int
    """Rows per batch; 0 for a model without a batch axis (one request per run)."""
    max_queue_delay_s: float
    preferred_batch_sizes: tuple[int, ...]
    max_queue_size: int
    max_padding_waste: float
    max_batch_tokens: int | None
    """Cap on a batch's padded tokens (rows x padded length of the first padded input)."""
    length_grouping: bool
    """Gather items of similar length into a batch (oldest item first, nearest lengths next)."""
    concurrency: int
    """Batches that may run at once (the runtime's instance count)."""
    oom_cooldown_s: float
    """After an out-of-memory failure, time before the lowered batch size limit grows again."""
    max_consecutive_failures: int
    """Single-item runtime failures in a row after which the batcher calls itself unhealthy."""
    max_queue_time_s: float | None = None
    """Longest a client's item may wait in the queue (never below `QUEUE_TIME_FLOOR_RUNS`
    measured runs of a request alone): one the queue's work says would wait longer is refused 4290
    when it arrives, and one that waited longer is answered 4290 (background items are
    exempt). None: no bound."""
    learn_batch_tokens: bool = True
    """Cap batches at the size that costs least per token, learned from run times
    (inferd.batching.sizing); False: only max_batch_size and max_batch_tokens cap them."""
    model: str = ""
    version: str = ""
    """Whose batcher this is: in log lines and observer events."""
    scan_window: int = 8
    """Batch formation looks at up to scan_window x max_batch_size queued items (the
    batcher's own bound on its work per batch, not a model setting)."""

    @property
    def label(self) -> str:
        return f"{self.model}/{self.version}"


@dataclass(frozen=True)
class BatchRecord:
    """What one finished batch reports to an observer."""

    items: int
    rows: int
    real_elements: int
    """Elements of the padded inputs before padding (tokens, for text)."""
    padded_elements: int
    """The same after padding; real / padded is the batch's padding efficiency."""
    queue_s: tuple[float, ...]
    run_s: float
    error: InferdError | None
    token_cap: int | None = None
    """The cap on padded tokens batches were formed under then (learned or configured)."""


@dataclass
class Timing:
    """Filled in by the batcher for one request: the longest wait of its items in the queue,
    the longest run of the batches that carried them, and the largest of those batches."""

    queue_s: float = 0.0
    run_s: float = 0.0
    batch_rows: int = 0

    def record(self, queue_s: float, run_s: float, batch_rows: int) -> None:
        self.queue_s = max(self.queue_s, queue_s)
        self.run_s = max(self.run_s, run_s)
        self.batch_rows = max(self.batch_rows, batch_rows)


@dataclass(eq=False)
class _Entry:
    feeds: Feeds
    rows: int
    sig: Signature
    enqueued_at: float
    future: asyncio.Future[dict[str, Array]]
    timer: asyncio.TimerHandle | None = field(default=None)
    timing: Timing | None = field(default=None)
    background: bool = False
    """Queued by background work (inferd.runtime.priority): shadow traffic."""
    head: bool = True
    """The first part of its request (a request over the batch size comes in parts)."""


class _ArrivalRate:
    """Rows per second, an exponentially weighted moving average over inter-arrival gaps."""

    def __init__(self, alpha: float = 0.2) -> None:
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


class DynamicBatcher:
    """Queue -> batch -> `run_batch` on a worker -> results back to each request, in order."""

    def __init__(
        self,
        layout: BatchLayout,
        settings: BatcherSettings,
        run_batch: RunBatch,
        observer: Observer | None = None,
    ) -> None:
        self._layout = layout
        self._settings = settings
        self._run_batch = run_batch
        self._observer = observer or Observer()
        self._queue: deque[_Entry] = deque()
        self._queued_rows = 0
        self._queued_requests = 0
        """Requests with their first part queued (what `QUEUE_TIME_MIN_ITEMS` counts)."""
        self._purged_at = 0.0
        self._running = 0
        self._running_rows = 0
        self._background_running = 0
        """Running batches made only of background items (they may not take every runtime)."""
        self._accepting = False
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop_task: asyncio.Task[None] | None = None
        self._batch_tasks: set[asyncio.Task[None]] = set()
        self._arrivals = _ArrivalRate()
        self._batch_s_ewma: float | None = None
        self._row_s_ewma: float | None = None
        self._lone_s_ewma: float | None = None
        """Run time of a batch of one item: what a request costs on its own."""
        """Run time of a batch per row it carried, of batches formed while more waited."""
        self._max_rows = settings.max_batch_size
        self._sizer = BatchSizer(settings.max_batch_tokens)
        self._limit_changed_at = 0.0
        self._consecutive_failures = 0

    # -- life -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._loop_task is not None:
            return
        self._accepting = True
        self._loop_task = asyncio.get_running_loop().create_task(
            self._dispatch_loop(), name="inferd-batcher"
        )

    async def drain(self, timeout_s: float) -> bool:
        """Refuses new requests, lets queued and running ones finish. True when all finished."""
        self._accepting = False
        self._wakeup.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stops the loop; whatever is still queued or running is answered 5030."""
        self._accepting = False
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        while self._queue:
            self._fail(self._pop_left(), UnavailableError("the model is shutting down"))
        for task in list(self._batch_tasks):
            task.cancel()
        await asyncio.gather(*self._batch_tasks, return_exceptions=True)

    # -- state for probes and metrics ------------------------------------------------------

    @property
    def queued_items(self) -> int:
        return len(self._queue)

    @property
    def capacity(self) -> int:
        """The items its queue holds at most (besides those running: how many run depends on
        the batches formed)."""
        return self._settings.max_queue_size

    @property
    def saturated(self) -> bool:
        """Whether one more item would be refused now for a full queue. Items whose clients
        left are purged at most every `SATURATION_PURGE_S` here (the queue is then full and
        this is asked for every request)."""
        limit = self._settings.max_queue_size
        if len(self._queue) < limit:
            return False
        now = time.monotonic()
        if now - self._purged_at >= SATURATION_PURGE_S:
            self._purged_at = now
            self._purge_done()
        return len(self._queue) >= limit

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    @property
    def running_batches(self) -> int:
        return self._running

    @property
    def accepting(self) -> bool:
        return self._accepting

    # -- submission ------------------------------------------------------------------------

    async def submit(
        self,
        feeds: Feeds,
        rows: int,
        deadline: float | None = None,
        timing: Timing | None = None,
    ) -> dict[str, Array]:
        """Queues one request of `rows` rows and waits for its outputs.

        `deadline` is on the event loop's clock (`loop.time()`). A request larger than
        max_batch_size is split into chunks that are queued together and reassembled in order.
        Cancelling the caller removes its queued chunks before they cost compute.
        """
        chunks = self._split(feeds, rows)
        return concat_chunks(await self._enqueue_and_wait(chunks, deadline, timing))

    async def submit_items(
        self,
        items: Sequence[Feeds],
        deadline: float | None = None,
        timing: Timing | None = None,
    ) -> list[dict[str, Array]]:
        """Queues one-row items (e.g. the texts of one request) and returns their outputs in
        order. Each item is batched on its own, so it may share a batch with other requests'
        items of similar length."""
        return await self._enqueue_and_wait([(feeds, 1) for feeds in items], deadline, timing)

    async def _enqueue_and_wait(
        self, parts: Sequence[tuple[Feeds, int]], deadline: float | None, timing: Timing | None
    ) -> list[dict[str, Array]]:
        if not self._accepting:
            raise UnavailableError("the model is not accepting requests (draining or stopped)")
        limit = self._settings.max_queue_size
        if len(self._queue) + len(parts) > limit:
            self._purge_done()
            if len(self._queue) + len(parts) > limit:
                raise QueueFullError(
                    f"the queue of this model is full ({limit} items)",
                    retry_after_s=self._retry_after_s(),
                )
        loop = asyncio.get_running_loop()
        now = loop.time()  # deadlines are on the loop's clock; durations on CLOCK (below)
        if deadline is not None and deadline <= now:
            raise DeadlineExceededError("the request's deadline passed before it was queued")
        if deadline is not None:  # (before the queue-time bound: the client's own is the
            # more precise answer, DEADLINE_EXCEEDED over gRPC)
            wait_s = self.expected_wait_s(sum(rows for _, rows in parts))
            if wait_s is not None and now + wait_s > deadline:
                raise DeadlineUnmetError(
                    f"the queue holds about {wait_s * 1000:.0f} ms of work, more than this "
                    f"request's deadline allows ({(deadline - now) * 1000:.0f} ms)",
                    retry_after_s=wait_s,
                )
        background = priority.in_background()
        if not background:
            overdue = self.queue_time_refusal()
            if overdue is not None:
                raise overdue
        entries: list[_Entry] = []
        total_rows = 0
        arrived = CLOCK()
        for part_feeds, part_rows in parts:
            entry = _Entry(
                feeds=part_feeds,
                rows=part_rows,
                sig=signature(part_feeds, self._layout),
                enqueued_at=arrived,
                future=loop.create_future(),
                timing=timing,
                background=background,
            )
            if deadline is not None:
                entry.timer = loop.call_at(deadline, self._expire, entry)
            entry.head = not entries
            entries.append(entry)
            self._queue.append(entry)
            self._queued_rows += part_rows
            self._queued_requests += entry.head
            total_rows += part_rows
        self._arrivals.observe(arrived, total_rows)
        self._idle.clear()
        self._wakeup.set()
        if len(entries) == 1:
            return [await entries[0].future]
        try:
            return list(await asyncio.gather(*(e.future for e in entries)))
        except BaseException:
            for e in entries:
                e.future.cancel()
            raise

    def _split(self, feeds: Feeds, rows: int) -> list[tuple[Feeds, int]]:
        limit = self._max_rows
        if not self._layout.batched or limit <= 0 or rows <= limit:
            return [(feeds, rows)]
        return [
            (
                {name: a[start : start + limit] for name, a in feeds.items()},
                min(limit, rows - start),
            )
            for start in range(0, rows, limit)
        ]

    def _expire(self, entry: _Entry) -> None:
        if not entry.future.done():
            entry.future.set_exception(
                DeadlineExceededError("the request's deadline passed before its result was ready")
            )
            self._wakeup.set()

    # -- dispatch --------------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            next_shed_s = self._shed_overdue(CLOCK())
            self._purge_head()
            if not self._queue or self._running >= self._settings.concurrency:
                if not self._queue and self._running == 0:
                    self._idle.set()
                self._wakeup.clear()
                shed_timer = None
                if next_shed_s is not None:
                    shed_timer = loop.call_later(next_shed_s, self._wakeup.set)
                await self._wakeup.wait()
                if shed_timer is not None:
                    shed_timer.cancel()
                continue
            wait_s = self._dispatch_wait(CLOCK())
            if next_shed_s is not None:
                wait_s = min(wait_s, next_shed_s)
            if wait_s > 0:
                self._wakeup.clear()
                timer = loop.call_later(wait_s, self._wakeup.set)
                await self._wakeup.wait()
                timer.cancel()
                continue
            batch, measured = self._form_batch()
            if batch:
                self._launch(batch, measured, full=bool(self._queue))
            else:  # only background items, and no runtime they may take: wait for a change
                self._wakeup.clear()
                await self._wakeup.wait()

    def _dispatch_wait(self, now: float) -> float:
        """Seconds to wait before dispatching; 0 to dispatch now."""
        settings = self._settings
        if self._running == 0 or not self._layout.batched or settings.max_batch_size <= 0:
            return 0.0
        queued = self._queued_rows
        if queued >= self._max_rows or queued in settings.preferred_batch_sizes:
            return 0.0
        remaining = settings.max_queue_delay_s - (now - self._queue[0].enqueued_at)
        if remaining <= 0:
            return 0.0
        rate = self._arrivals.rows_per_s()
        if rate <= 0:
            return 0.0
        fill_s = (settings.max_batch_size - queued) / rate
        return fill_s if fill_s <= remaining else 0.0

    def _pop_left(self) -> _Entry:
        entry = self._queue.popleft()
        self._queued_rows -= entry.rows
        self._queued_requests -= entry.head
        return entry

    def _purge_head(self) -> None:
        while self._queue and self._queue[0].future.done():
            self._pop_left()

    def _purge_done(self) -> None:
        kept = deque(e for e in self._queue if not e.future.done())
        self._queued_rows = sum(e.rows for e in kept)
        self._queued_requests = sum(e.head for e in kept)
        self._queue = kept

    def _form_batch(self) -> tuple[list[_Entry], bool]:
        """The next batch, and whether its run time teaches the sizer (inferd.batching.
        sizing): a client batch formed while every other runtime is busy and more items wait."""
        settings = self._settings
        window = max(settings.max_batch_size, 1) * settings.scan_window
        candidates: list[_Entry] = []
        for entry in self._queue:
            if len(candidates) >= window:
                break
            if not entry.future.done():
                candidates.append(entry)
        if not candidates:
            self._purge_done()
            return [], False
        # background items (shadow traffic, jobs) never share a batch with, nor go before,
        # the clients waiting: they run alone, when no client's item waits
        foreground = [e for e in candidates if not e.background]
        if foreground:
            candidates = foreground
        elif self._running > self._background_running:
            return [], False  # a client's batch runs: background work waits for idle runtimes
        elif self._background_running >= max(1, self._settings.concurrency - 1):
            return [], False  # one runtime stays free for the next client's batch
        else:
            # one item at a time: a client arriving meanwhile shares the cores with little
            candidates = candidates[:1]
        max_rows = self.max_rows(CLOCK()) if self._layout.batched else 0
        measured = (
            settings.learn_batch_tokens
            and max_rows > 0
            and bool(foreground)
            and len(candidates) > 1
            and self._running >= settings.concurrency - 1
        )
        chosen = select_batch(
            candidates,
            max_rows,
            settings.max_padding_waste,
            self._sizer.next_cap() if measured else self._sizer.cap_tokens,
            settings.length_grouping,
        )
        batch = [candidates[i] for i in chosen]
        taken = set(map(id, batch))
        self._queue = deque(e for e in self._queue if id(e) not in taken and not e.future.done())
        self._queued_rows = sum(e.rows for e in self._queue)
        self._queued_requests = sum(e.head for e in self._queue)
        return batch, measured

    def _launch(self, batch: list[_Entry], measured: bool, full: bool = False) -> None:
        """Runs the batch in its own task: as background work when all its items are (on
        the runtime's background threads), else at the serving priority."""
        self._running += 1
        rows = sum(e.rows for e in batch)
        self._running_rows += rows
        background = all(e.background for e in batch)
        self._background_running += background
        marked = priority.context(background)
        task = asyncio.get_running_loop().create_task(
            self._run(batch, background, measured, rows if full else 0), context=marked
        )
        self._batch_tasks.add(task)
        task.add_done_callback(self._batch_tasks.discard)

    async def _run(
        self, batch: Sequence[_Entry], background: bool, measured: bool, full_rows: int
    ) -> None:
        """`full_rows`: the batch's rows when it was formed while more items waited (its run
        time per row is then what a queued row costs), else 0."""
        started = CLOCK()
        try:
            await self._execute(list(batch), measured)
        except asyncio.CancelledError:
            for entry in batch:
                self._fail(entry, UnavailableError("the model is shutting down"))
            raise
        else:
            if full_rows > 0:
                row_s = (CLOCK() - started) / full_rows
                prev = self._row_s_ewma
                self._row_s_ewma = row_s if prev is None else prev + 0.2 * (row_s - prev)
        finally:
            self._running -= 1
            self._running_rows -= sum(e.rows for e in batch)
            self._background_running -= background
            self._wakeup.set()

    async def _execute(self, batch: list[_Entry], measured: bool = False) -> None:
        """Runs a batch. On failure the batch is split in halves and each half retried, so that
        only the items that fail on their own get an error; an out-of-memory failure also
        lowers the batch size limit for a cool-down."""
        batch = [e for e in batch if not e.future.done()]  # expired or gone meanwhile
        if not batch:
            return
        started = CLOCK()
        rows = [e.rows for e in batch]
        error: InferdError | None = None
        parts: list[dict[str, Array]] = []
        try:
            feeds = merge_feeds([e.feeds for e in batch], self._layout)
            outputs = await self._run_batch(feeds)
            parts = split_outputs(outputs, [e.feeds for e in batch], rows, self._layout)
        except asyncio.CancelledError:
            raise
        except InferdError as exc:
            error = exc
        except Exception as exc:
            log.exception(
                "batch failed", extra={"batcher": self._settings.label, "items": len(batch)}
            )
            error = InternalError("the batch failed while running")
            error.__cause__ = exc
        run_s = CLOCK() - started
        self._observe(batch, rows, started, run_s, error)
        if error is None:
            prev = self._batch_s_ewma
            self._batch_s_ewma = run_s if prev is None else prev + 0.2 * (run_s - prev)
            if len(batch) == 1:
                prev = self._lone_s_ewma
                self._lone_s_ewma = run_s if prev is None else prev + 0.2 * (run_s - prev)
            self._consecutive_failures = 0
            total_rows = sum(rows)
            if measured:
                self._learn_size(batch, total_rows, run_s)
            for entry, part in zip(batch, parts, strict=True):
                if entry.timer is not None:
                    entry.timer.cancel()
                if entry.timing is not None:
                    entry.timing.record(started - entry.enqueued_at, run_s, total_rows)
                if not entry.future.done():
                    entry.future.set_result(part)
            return
        if isinstance(error, OutOfMemoryError):
            self._memory_pressure(sum(rows), CLOCK())
        if len(batch) > 1:
            half = len(batch) // 2
            await self._execute(batch[:half])
            await self._execute(batch[half:])
            return
        self._fail(batch[0], error)
        self._count_failure(error)

    def _learn_size(self, batch: Sequence[_Entry], rows: int, run_s: float) -> None:
        before = self._sizer.cap_tokens
        self._sizer.observe(token_cost(rows, max_extent([e.sig.extent for e in batch])), run_s)
        if self._sizer.cap_tokens != before:
            log.debug(
                "batch token cap learned",
                extra={"batcher": self._settings.label, **self._sizer.state()},
            )

    def _count_failure(self, error: InferdError) -> None:
        """A runtime that fails even one item at a time, again and again, is unhealthy."""
        if error.code is ErrorCode.INVALID_INPUT:
            return  # the input's fault, not the runtime's
        self._consecutive_failures += 1
        if self._consecutive_failures < self._settings.max_consecutive_failures:
            return
        reason = (
            f"the runtime failed {self._consecutive_failures} times in a row, "
            f"one item at a time (last: {error.message})"
        )
        log.error("runtime unhealthy", extra={"batcher": self._settings.label, "reason": reason})
        self._accepting = False
        while self._queue:
            self._fail(self._pop_left(), UnavailableError(f"the model is unhealthy: {reason}"))
        notify(self._observer.on_unhealthy, self._settings.model, self._settings.version, reason)

    def _memory_pressure(self, rows: int, now: float) -> None:
        limit = max(1, rows // 2)
        if limit >= self._max_rows:
            return
        self._max_rows = limit
        self._limit_changed_at = now
        log.warning(
            "out of memory: batch size limit lowered",
            extra={
                "batcher": self._settings.label,
                "rows": rows,
                "limit": limit,
                "cooldown_s": self._settings.oom_cooldown_s,
            },
        )
        identity = (self._settings.model, self._settings.version)
        notify(self._observer.on_memory_pressure, *identity, rows, limit)

    def max_rows(self, now: float) -> int:
        """The batch size limit now: lowered after an out-of-memory failure, raised back by
        half of itself each cool-down period without one."""
        full = self._settings.max_batch_size
        if self._max_rows < full and now - self._limit_changed_at >= self._settings.oom_cooldown_s:
            self._max_rows = min(full, self._max_rows + max(1, self._max_rows // 2))
            self._limit_changed_at = now
            log.info(
                "batch size limit raised",
                extra={"batcher": self._settings.label, "limit": self._max_rows},
            )
        return self._max_rows

    def _observe(
        self,
        batch: Sequence[_Entry],
        rows: list[int],
        started: float,
        run_s: float,
        error: InferdError | None,
    ) -> None:
        try:
            real, padded = padding_counts(rows, [e.sig.extent for e in batch])
            record = BatchRecord(
                items=len(batch),
                rows=sum(rows),
                real_elements=real,
                padded_elements=padded,
                queue_s=tuple(started - e.enqueued_at for e in batch),
                run_s=run_s,
                error=error,
                token_cap=self._sizer.cap_tokens,
            )
        except Exception:  # a bug in counting must not fail the batch's requests
            log.exception("batch record failed; the batch itself is unaffected")
            return
        notify(self._observer.on_batch, self._settings.model, self._settings.version, record)

    def _fail(self, entry: _Entry, error: InferdError) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
        if not entry.future.done():
            entry.future.set_exception(error)

    def queue_wait_s(self, ahead: int) -> float | None:
        """How long an item arriving now would wait in the queue with `ahead` rows before it:
        their share of the runtimes at the measured cost of a queued row, plus a whole batch
        when every runtime is busy (the one it waits for to finish). None until a batch
        formed under load has been measured."""
        row_s, batch_s = self._row_s_ewma, self._batch_s_ewma
        if row_s is None or batch_s is None:
            return None
        busy = batch_s if self._running >= self._settings.concurrency else 0.0
        return ahead * row_s / self._settings.concurrency + busy

    def queue_time_bound_s(self) -> float | None:
        """The queue-time bound in force: `max_queue_time_s`, or `QUEUE_TIME_FLOOR_RUNS`
        measured runs of a request alone when that is longer; None when there is no bound, or
        no run has been measured yet (nothing says yet how long a burst of this model takes:
        the first batch of a slow model may hold the first arrivals past the bound)."""
        bound = self._settings.max_queue_time_s
        run_s = self._lone_s_ewma if self._lone_s_ewma is not None else self._batch_s_ewma
        if bound is None or run_s is None:
            return None
        return max(bound, QUEUE_TIME_FLOOR_RUNS * run_s)

    def queue_time_refusal(self, arriving: int = 0) -> QueueFullError | None:
        """The 4290 an item arriving now gets because the queued work ahead of it would take
        longer than `ADMIT_SHARE` of the bound in force (`queue_time_bound_s`), or the oldest
        queued item has waited that long already (None when neither, or there is no bound):
        `arriving`, the requests to this queue read and not answered yet, count ahead of it
        beside those queued (less those running). Never with fewer than
        `QUEUE_TIME_MIN_ITEMS` requests ahead of it (`arriving` counts the arriving one and
        those running)."""
        bound = self.queue_time_bound_s()
        if bound is None:
            return None
        items_ahead = max(self._queued_requests, arriving - 1 - self._running)
        if items_ahead < QUEUE_TIME_MIN_ITEMS:
            return None
        ahead = max(self._queued_rows, arriving - self._running_rows)
        wait_s = self.queue_wait_s(ahead)
        if self._queue:  # what the oldest has waited already: the estimate's floor, measured
            oldest_s = CLOCK() - self._queue[0].enqueued_at
            wait_s = oldest_s if wait_s is None else max(wait_s, oldest_s)
        if wait_s is None or wait_s <= bound * ADMIT_SHARE:
            return None
        return QueueFullError(
            f"the queue of model '{self._settings.model}' holds about {wait_s * 1000:.0f} ms "
            f"of work, more than its bound of {bound * 1000:.0f} ms admits; retry later",
            retry_after_s=wait_s - bound * ADMIT_SHARE,
        )

    def _shed_overdue(self, now: float) -> float | None:
        """Answers 4290 to the client items that waited longer than the bound in force; the
        seconds until the next one would, or None (no bound, or fewer than
        `QUEUE_TIME_MIN_ITEMS` queued: a burst is served in turn)."""
        bound = self.queue_time_bound_s()
        if bound is None or self._queued_requests < QUEUE_TIME_MIN_ITEMS:
            return None
        shed = 0
        for entry in self._queue:
            waited = now - entry.enqueued_at
            if waited <= bound:
                return bound - waited
            if entry.background or entry.future.done():
                continue
            shed += 1
            self._fail(
                entry,
                QueueFullError(
                    f"the request waited {waited * 1000:.0f} ms in the queue of model "
                    f"'{self._settings.model}', over its bound of {bound * 1000:.0f} ms; "
                    "retry later",
                    retry_after_s=self._retry_after_s(),
                ),
            )
        return None

    def expected_wait_s(self, rows: int) -> float | None:
        """How long `rows` more rows would take to be answered, from the measured batch time:
        the batches queued ahead of them plus their own, over the runtime's concurrency.
        None until a batch has been measured."""
        per_batch = self._batch_s_ewma
        if per_batch is None:
            return None
        size = max(self._max_rows, 1)
        batches = math.ceil((self._queued_rows + rows) / size)
        return per_batch * batches / self._settings.concurrency

    def _retry_after_s(self) -> float:
        per_batch = self._batch_s_ewma or 0.1
        size = max(self._settings.max_batch_size, 1)
        batches_ahead = math.ceil(self._queued_rows / size) / self._settings.concurrency
        return max(1.0, per_batch * batches_ahead)
