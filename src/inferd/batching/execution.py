"""Running one batch: its items' feeds merged, run, and the outputs sliced back to each item.

A batch that fails is split in halves and each half retried, so that only the items that fail
on their own get an error; an out-of-memory failure also lowers the batch size limit
(inferd.batching.runtime_health). Every run is reported to the observer (`BatchRecord`) and
measured: run costs, the learned batch size, the runtime's failures in a row.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from inferd.batching.backlog import Entry
from inferd.batching.formation import max_extent, padding_counts, token_cost
from inferd.batching.layout import BatchLayout
from inferd.batching.measures import CLOCK, RunCosts
from inferd.batching.padding import merge_feeds, split_outputs
from inferd.batching.runtime_health import RuntimeHealth
from inferd.batching.settings import BatcherSettings
from inferd.batching.sizing import BatchSizer
from inferd.errors import InferdError, InternalError, OutOfMemoryError
from inferd.observability.observer import BatchRan, Observer, notify
from inferd.observability.trace import BatchPart
from inferd.runtime.protocol import Array

log = logging.getLogger("inferd.batching.batcher")  # (the batcher's lines keep its name)
_SERIALS = itertools.count(1)
"""Each batch run's number, the same for every request in it (its trace's link)."""

RunBatch = Callable[[dict[str, Array]], Awaitable[dict[str, Array]]]


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


class BatchExecution:
    """Runs the batches of one batcher on `run_batch`; `on_unhealthy` is called with the reason
    when the runtime turns unhealthy (inferd.batching.runtime_health)."""

    def __init__(
        self,
        layout: BatchLayout,
        settings: BatcherSettings,
        run_batch: RunBatch,
        observer: Observer,
        costs: RunCosts,
        sizer: BatchSizer,
        health: RuntimeHealth,
        on_unhealthy: Callable[[str], None],
    ) -> None:
        self._layout = layout
        self._settings = settings
        self._run_batch = run_batch
        self._observer = observer
        self._costs = costs
        self._sizer = sizer
        self._health = health
        self._on_unhealthy = on_unhealthy

    async def execute(self, batch: list[Entry], measured: bool = False) -> None:
        """Runs a batch and answers each of its items; `measured`: its run time teaches the
        sizer (inferd.batching.sizing)."""
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
        serial = next(_SERIALS)
        self._observe(batch, rows, started, run_s, error)
        if error is None:
            self._costs.batch_ran(len(batch), run_s)
            self._health.succeeded()
            total_rows = sum(rows)
            if measured:
                self._learn_size(batch, total_rows, run_s)
            for entry, part in zip(batch, parts, strict=True):
                if entry.timer is not None:
                    entry.timer.cancel()
                if entry.timing is not None:
                    entry.timing.record(
                        BatchPart(entry.enqueued_at, started, run_s, total_rows, serial)
                    )
                if not entry.future.done():
                    entry.future.set_result(part)
            return
        if isinstance(error, OutOfMemoryError):
            self._health.out_of_memory(sum(rows), CLOCK())
        if len(batch) > 1:
            half = len(batch) // 2
            await self.execute(batch[:half])
            await self.execute(batch[half:])
            return
        failed = batch[0]
        if failed.timing is not None:  # (its trace shows the batch it failed in)
            failed.timing.record(BatchPart(failed.enqueued_at, started, run_s, sum(rows), serial))
        failed.fail(error)
        reason = self._health.failed(error)
        if reason is not None:
            self._on_unhealthy(reason)

    def _learn_size(self, batch: Sequence[Entry], rows: int, run_s: float) -> None:
        before = self._sizer.cap_tokens
        self._sizer.observe(token_cost(rows, max_extent([e.sig.extent for e in batch])), run_s)
        if self._sizer.cap_tokens != before:
            log.debug(
                "batch token cap learned",
                extra={"batcher": self._settings.label, **self._sizer.state()},
            )

    def _observe(
        self,
        batch: Sequence[Entry],
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
        notify(self._observer, BatchRan(self._settings.model, self._settings.version, record))
