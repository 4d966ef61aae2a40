"""What a batcher holds: its queued items in arrival order, with their rows and requests
counted (and each client's: inferd.batching.fairness), and the batches running with their
rows."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from inferd.batching.fairness import FairShare, Rank
from inferd.batching.formation import Signature
from inferd.clients import ANONYMOUS, Client
from inferd.errors import DeadlineExceededError, InferdError
from inferd.observability.trace import PARTS_KEPT, BatchPart, RequestTrace
from inferd.runtime.protocol import Array, Feeds


@dataclass
class Timing:
    """Filled in by the batcher for one request: the longest wait of its items in the queue,
    the longest run of the batches that carried them, the largest of those batches, and the
    batches themselves (for its trace's spans)."""

    queue_s: float = 0.0
    run_s: float = 0.0
    batch_rows: int = 0
    parts: list[BatchPart] = field(default_factory=list)

    def record(self, part: BatchPart) -> None:
        """A batch that carried items of the request (recorded once a batch, however many of
        its items it carried)."""
        self.queue_s = max(self.queue_s, part.started - part.enqueued_at)
        self.run_s = max(self.run_s, part.run_s)
        self.batch_rows = max(self.batch_rows, part.rows)
        if len(self.parts) < PARTS_KEPT and all(p.serial != part.serial for p in self.parts):
            self.parts.append(part)

    def fill(self, trace: RequestTrace) -> None:
        """Gives the request's trace its queue and run times, batch size and batches."""
        trace.queue_s, trace.inference_s = self.queue_s, self.run_s
        trace.batch_size = self.batch_rows
        trace.batches = self.parts


@dataclass(eq=False)
class Entry:
    """One queued item: a request, or one part of a request over the batch size."""

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
    client: str = ANONYMOUS.name
    rank: Rank = field(default_factory=lambda: Rank(0, 0.0))
    """Its place in the fair order between clients (set when it is queued)."""

    def fail(self, error: InferdError) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if not self.future.done():
            self.future.set_exception(error)

    def expire(self, wake: Callable[[], None]) -> None:
        """Its deadline passed: answered so (and `wake` called), unless answered already."""
        if not self.future.done():
            self.future.set_exception(
                DeadlineExceededError("the request's deadline passed before its result was ready")
            )
            wake()


class Backlog:
    """The queue and the running batches of one batcher, with the counts its dispatch and
    admission read. Items whose futures are done (expired, cancelled, shed) stay counted until
    they are purged."""

    def __init__(self) -> None:
        self.queue: deque[Entry] = deque()
        self.queued_rows = 0
        self.queued_requests = 0
        """Requests with their first part queued (what admission's minimum counts)."""
        self.running = 0
        self.running_rows = 0
        self.launched = 0
        """Batches started so far (a run that saw it unchanged ran with no other starting)."""
        self.background_running = 0
        """Running batches made only of background items (they may not take every runtime)."""
        self.fair = FairShare()

    def add(self, entries: Sequence[Entry], client: Client = ANONYMOUS) -> None:
        """Queues the parts of one request of `client`, in order."""
        queue = self.queue
        for entry in entries:
            entry.client = client.name
            entry.rank = self.fair.queued(client, entry.rows)
            queue.append(entry)
            self.queued_rows += entry.rows
            self.queued_requests += entry.head

    def fail_all(self, error: InferdError) -> None:
        """Answers every queued item `error`, emptying the queue."""
        while self.queue:
            self.pop_left().fail(error)

    def pop_left(self) -> Entry:
        entry = self.queue.popleft()
        self.queued_rows -= entry.rows
        self.queued_requests -= entry.head
        self.fair.left(entry.client, entry.rows)
        return entry

    def purge_head(self) -> None:
        """Drops the done items at the head of the queue."""
        while self.queue and self.queue[0].future.done():
            self.pop_left()

    def purge_done(self) -> None:
        """Drops every done item."""
        self.take(())

    def take(self, batch: Sequence[Entry]) -> None:
        """Removes the items of `batch` from the queue, and every done item with them."""
        taken = set(map(id, batch))
        kept: deque[Entry] = deque()
        rows = requests = 0  # what leaves, counted off (one pass, not a recount of what stays)
        for entry in self.queue:
            if id(entry) in taken or entry.future.done():
                rows += entry.rows
                requests += entry.head
                self.fair.left(entry.client, entry.rows)
            else:
                kept.append(entry)
        self.queue = kept
        self.queued_rows -= rows
        self.queued_requests -= requests

    def started(self, rows: int, background: bool) -> None:
        self.running += 1
        self.launched += 1
        self.running_rows += rows
        self.background_running += background

    def finished(self, rows: int, background: bool) -> None:
        self.running -= 1
        self.running_rows -= rows
        self.background_running -= background
