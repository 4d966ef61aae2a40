"""A step's token masks for the rows drawn in Python (inferd.generation.constraint; the rows
drawn in the graph take theirs as its bias: inferd.generation.bias): started before the step
runs, on a mask thread while it runs when they take long, taken when its tokens are drawn."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

INLINE_MASK_S = 50e-6
"""Masks expected under this are computed when the draw needs them, on the loop's thread;
costlier ones on a mask thread while the model's step runs."""


class Masks:
    """The token masks of a step's constrained rows: started before the step runs, taken
    when its tokens are drawn. A mask that takes long (a large vocabulary, a hard grammar) is
    computed on a mask thread while the model's step runs; a quick one when the draw needs
    it (handing it to a thread would cost more than it does)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._mask_s: float | None = None
        """The last masks' time per row (a moving average)."""

    def start(self, seqs: Sequence[Any]) -> PendingMasks | None:
        """None when no row of `seqs` is constrained."""
        rows = [s for s in seqs if s.constraint is not None]
        if not rows:
            return None
        pending = PendingMasks(rows, self)
        if self._mask_s is None or self._mask_s >= INLINE_MASK_S:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="inferd-mask")
            pending.future = asyncio.wrap_future(self._pool.submit(pending.compute))
        return pending

    def learn(self, seconds: float, rows: int) -> None:
        per_row = seconds / rows
        self._mask_s = per_row if self._mask_s is None else 0.8 * self._mask_s + 0.2 * per_row

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class PendingMasks:
    def __init__(self, rows: list[Any], masks: Masks) -> None:
        self._rows = rows
        self._masks = masks
        self.future: asyncio.Future[dict[int, np.ndarray[Any, Any]]] | None = None

    def compute(self) -> dict[int, np.ndarray[Any, Any]]:
        """Each constrained row's mask, by the sequence's id. Its cost is learnt as the CPU
        time of the thread that computes it: on a mask thread beside a running step, the
        wall time would count the wait for a core too."""
        started = time.thread_time()
        out = {id(seq): seq.constraint.mask() for seq in self._rows}
        self._masks.learn(time.thread_time() - started, len(self._rows))
        return out

    async def result(self) -> dict[int, np.ndarray[Any, Any]]:
        if self.future is not None:
            return await self.future
        return self.compute()


async def taken(pending: PendingMasks | None) -> dict[int, np.ndarray[Any, Any]] | None:
    """The masks started, once made (None when none were)."""
    return None if pending is None else await pending.result()


def allowed_ids(mask: np.ndarray[Any, Any], vocab: int) -> np.ndarray[Any, Any]:
    """The token ids a mask allows (ascending), below `vocab` (the model's logits' width)."""
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab]
    return np.flatnonzero(bits)
