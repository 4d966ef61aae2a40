"""What a runtime's failures do to its batcher: an out-of-memory failure lowers the batch size
limit, which grows back after a cool-down without one; failures in a row of items run one at a
time make the runtime unhealthy."""

from __future__ import annotations

import logging

from inferd.batching.settings import BatcherSettings
from inferd.errors import ErrorCode, InferdError
from inferd.observability.observer import MemoryPressure, Observer, notify

log = logging.getLogger("inferd.batching.batcher")  # (the batcher's lines keep its name)


class RuntimeHealth:
    """One batcher's batch size limit and its count of failures in a row."""

    def __init__(self, settings: BatcherSettings, observer: Observer) -> None:
        self._settings = settings
        self._observer = observer
        self.limit = settings.max_batch_size
        """The batch size limit as last lowered or raised (`current_limit` raises it back)."""
        self._changed_at = 0.0
        self._failures = 0

    def current_limit(self, now: float) -> int:
        """The batch size limit now: lowered after an out-of-memory failure, raised back by
        half of itself each cool-down period without one."""
        full = self._settings.max_batch_size
        if self.limit < full and now - self._changed_at >= self._settings.oom_cooldown_s:
            self.limit = min(full, self.limit + max(1, self.limit // 2))
            self._changed_at = now
            log.info(
                "batch size limit raised",
                extra={"batcher": self._settings.label, "limit": self.limit},
            )
        return self.limit

    def out_of_memory(self, rows: int, now: float) -> None:
        """A batch of `rows` rows ran out of memory: the limit drops to half of it."""
        limit = max(1, rows // 2)
        if limit >= self.limit:
            return
        self.limit = limit
        self._changed_at = now
        log.warning(
            "out of memory: batch size limit lowered",
            extra={
                "batcher": self._settings.label,
                "rows": rows,
                "limit": limit,
                "cooldown_s": self._settings.oom_cooldown_s,
            },
        )
        event = MemoryPressure(self._settings.model, self._settings.version, rows, limit)
        notify(self._observer, event)

    def succeeded(self) -> None:
        """A batch ran: the failures in a row end."""
        self._failures = 0

    def failed(self, error: InferdError) -> str | None:
        """A single item failed with `error`. The reason the runtime is unhealthy when that
        made it so (it fails even one item at a time, again and again), else None."""
        if error.code is ErrorCode.INVALID_INPUT:
            return None  # the input's fault, not the runtime's
        self._failures += 1
        if self._failures < self._settings.max_consecutive_failures:
            return None
        reason = (
            f"the runtime failed {self._failures} times in a row, "
            f"one item at a time (last: {error.message})"
        )
        log.error("runtime unhealthy", extra={"batcher": self._settings.label, "reason": reason})
        return reason
