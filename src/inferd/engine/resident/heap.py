"""The server's long-lived heap, kept out of the cyclic garbage collector's scans.

Python's collector finds reference cycles by scanning the objects it tracks, and a collection
of the oldest generation scans every one of them. Most of a server's heap is made once and
lives as long as the process or its models: the web framework, the runtime's bindings, the
tokenizers, configurations and metrics (about 100k objects with the demo model). A collection
of all of it paused the event loop, and every answer waiting on it, for 71-85 ms about every
2,000 requests (the demo model, one request at a time: benchmarks/ab_bench.py heap). `settle`
collects once and freezes what is then alive (`gc.freeze`): later collections scan only what
was made after it. It runs when start-up loading ends and after each change to what is
loaded, unfreezing first, so that what an unloaded model leaves in cycles is collected then.

Imports nothing of inferd.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger(__name__)

SETTLE_AFTER_S = 30.0
"""After an on-demand load or eviction, the long-lived heap is collected and frozen again
(`settle`: a pause of the event loop, 70-100 ms with a few models) at most this long after,
once for all the changes meanwhile: under churn, one pause per this period instead of one per
change."""


def settle() -> None:
    """Collects everything once, then freezes what is left out of later collections."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    log.info(
        "long-lived heap frozen",
        extra={
            "objects": gc.get_freeze_count(),
            "seconds": round(time.perf_counter() - started, 4),
        },
    )


class SettleLater:
    """One `settle` `after_s` after the first change that asks for it, for every change
    asking meanwhile (on the event loop)."""

    def __init__(self, after_s: float = SETTLE_AFTER_S) -> None:
        self.after_s = after_s
        self._timer: asyncio.TimerHandle | None = None

    def ask(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.after_s, self._settle)

    def _settle(self) -> None:
        self._timer = None
        settle()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
