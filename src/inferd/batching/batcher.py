"""`DynamicBatcher`: a bounded queue of requests in front of a runtime, dispatched in batches.

The batcher is the loop and the tasks; it composes the parts that decide: admission and
shedding (inferd.batching.queue_admission), when a batch forms and what it takes
(inferd.batching.dispatch_policy), running a batch and isolating its failures
(inferd.batching.execution), the batch size limit and the runtime's health
(inferd.batching.runtime_health).

Every admitted request owns futures that every path resolves: result, batch error, deadline,
cancellation by its caller, drain and close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from inferd.batching.backlog import Backlog, Entry, Timing
from inferd.batching.dispatch_policy import DispatchPolicy
from inferd.batching.execution import BatchExecution, RunBatch
from inferd.batching.formation import signature, split_rows
from inferd.batching.layout import BatchLayout
from inferd.batching.measures import CLOCK, ArrivalRate, RunCosts
from inferd.batching.padding import concat_chunks
from inferd.batching.queue_admission import Admission
from inferd.batching.runtime_health import RuntimeHealth
from inferd.batching.settings import BatcherSettings
from inferd.batching.sizing import BatchSizer
from inferd.clients import current_client
from inferd.drain import ended_within
from inferd.errors import UnavailableError
from inferd.observability.observer import Observer, Unhealthy, notify
from inferd.runtime import priority
from inferd.runtime.protocol import Array, Feeds


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
        self._observer = observer or Observer()
        self._backlog = Backlog()
        self._accepting = False
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop_task: asyncio.Task[None] | None = None
        self._batch_tasks: set[asyncio.Task[None]] = set()
        self._arrivals = ArrivalRate()
        self._costs = RunCosts()
        sizer = BatchSizer(settings.max_batch_tokens)
        self._health = RuntimeHealth(settings, self._observer)
        self.admission = Admission(settings, self._backlog, self._costs, self._health)
        """What it admits, and what it refuses for a full queue or one too slow to drain."""
        self._policy = DispatchPolicy(
            layout, settings, self._backlog, self._arrivals, self._health, sizer, self._costs
        )
        self._execution = BatchExecution(
            layout,
            settings,
            run_batch,
            self._observer,
            self._costs,
            sizer,
            self._health,
            self._turn_unhealthy,
        )

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
        return await ended_within(self._idle, timeout_s)

    async def close(self) -> None:
        """Stops the loop; whatever is still queued or running is answered 5030."""
        self._accepting = False
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        self._backlog.fail_all(UnavailableError("the model is shutting down"))
        for task in list(self._batch_tasks):
            task.cancel()
        await asyncio.gather(*self._batch_tasks, return_exceptions=True)

    def _turn_unhealthy(self, reason: str) -> None:
        """Refuses new requests and answers the queued ones 5030; the observer is told."""
        self._accepting = False
        self._backlog.fail_all(UnavailableError(f"the model is unhealthy: {reason}"))
        notify(self._observer, Unhealthy(self._settings.model, self._settings.version, reason))

    # -- state for probes, metrics and admission --------------------------------------------

    @property
    def queued_items(self) -> int:
        return len(self._backlog.queue)

    @property
    def queued_requests(self) -> int:
        """Requests waiting (a request over the batch size, queued in parts, counts once)."""
        return self._backlog.queued_requests

    @property
    def capacity(self) -> int:
        """The items its queue holds at most (besides those running: how many run depends on
        the batches formed)."""
        return self._settings.max_queue_size

    @property
    def running_batches(self) -> int:
        return self._backlog.running

    @property
    def accepting(self) -> bool:
        return self._accepting

    def max_rows(self, now: float) -> int:
        """The batch size limit now (`RuntimeHealth.current_limit`)."""
        return self._health.current_limit(now)

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
        chunks = split_rows(feeds, rows, self._health.limit if self._layout.batched else 0)
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
        loop = asyncio.get_running_loop()
        background = priority.in_background()
        # deadlines are on the loop's clock; durations on CLOCK (below)
        self.admission.admit(parts, deadline, loop.time(), background)
        arrived = CLOCK()
        entries = [
            Entry(
                feeds,
                rows,
                signature(feeds, self._layout),
                arrived,
                loop.create_future(),
                timing=timing,
                background=background,
                head=i == 0,
            )
            for i, (feeds, rows) in enumerate(parts)
        ]
        if deadline is not None:
            for entry in entries:
                entry.timer = loop.call_at(deadline, entry.expire, self._wakeup.set)
        self._backlog.add(entries, current_client())
        self._arrivals.observe(arrived, sum(rows for _, rows in parts))
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

    # -- dispatch --------------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        backlog = self._backlog
        concurrency = self._settings.concurrency
        while True:
            next_shed_s = self.admission.shed_overdue(CLOCK())
            backlog.purge_head()
            if not backlog.queue or backlog.running >= concurrency:
                if not backlog.queue and backlog.running == 0:
                    self._idle.set()
                self._wakeup.clear()
                shed_timer = None
                if next_shed_s is not None:
                    shed_timer = loop.call_later(next_shed_s, self._wakeup.set)
                await self._wakeup.wait()
                if shed_timer is not None:
                    shed_timer.cancel()
                continue
            wait_s = self._policy.wait_s(CLOCK())
            if next_shed_s is not None:
                wait_s = min(wait_s, next_shed_s)
            if wait_s > 0:
                self._wakeup.clear()
                timer = loop.call_later(wait_s, self._wakeup.set)
                await self._wakeup.wait()
                timer.cancel()
                continue
            batch, measured, yielding = self._policy.next_batch()
            if batch:
                self._launch(batch, measured, full=bool(backlog.queue), yielding=yielding)
            else:  # only background items, and no runtime they may take: wait for a change
                self._wakeup.clear()
                await self._wakeup.wait()

    def _launch(
        self, batch: list[Entry], measured: bool, full: bool = False, yielding: bool = False
    ) -> None:
        """Runs the batch in its own task: as background work when all its items are (on
        the runtime's background threads), below the serving priority when `yielding` (a
        flooding client's), else at the serving priority."""
        rows = sum(e.rows for e in batch)
        background = all(e.background for e in batch)
        self._backlog.started(rows, background)
        marked = priority.context(background, yielding)
        task = asyncio.get_running_loop().create_task(
            self._run(batch, background, measured, rows if full else 0), context=marked
        )
        self._batch_tasks.add(task)
        task.add_done_callback(self._batch_tasks.discard)

    async def _run(
        self, batch: Sequence[Entry], background: bool, measured: bool, full_rows: int
    ) -> None:
        """`full_rows`: the batch's rows when it was formed while more items waited (its run
        time per row is then what a queued row costs), else 0."""
        started = CLOCK()
        backlog = self._backlog
        alone = len(batch) == 1 and backlog.running == 1  # (no other batch of its model)
        launched = backlog.launched
        try:
            await self._execution.execute(list(batch), measured)
        except asyncio.CancelledError:
            for entry in batch:
                entry.fail(UnavailableError("the model is shutting down"))
            raise
        else:
            now = CLOCK()
            if full_rows > 0:
                self._costs.full_batch_ran(full_rows, now - started)
            rows = sum(e.rows for e in batch)
            self._costs.answered(now, rows, bool(backlog.queued_requests))
            if alone and backlog.launched == launched:  # and none started meanwhile
                self._costs.ran_alone(now - started)
        finally:
            self._backlog.finished(sum(e.rows for e in batch), background)
            self._wakeup.set()
