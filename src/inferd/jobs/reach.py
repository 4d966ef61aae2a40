"""Whether the job store answers: one warning when it stops, one line when it answers again,
and nothing in between (a store that is down for an hour is one line, not one a request or
one a second from the worker). The server's `/ready` shows it; readiness for inference does
not depend on it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

UNREACHABLE = "the job store is unreachable"


class Reach:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._down_since: float | None = None
        self._reason = ""

    def failed(self, reason: str) -> None:
        """A call could not reach the store (`reason`: what the client library said)."""
        if self._down_since is None:
            self._down_since = self._clock()
            self._reason = reason
            log.warning(
                f"{UNREACHABLE}: jobs are refused with 503 (5030) until it answers again",
                extra={"reason": reason},
            )

    def answered(self) -> None:
        if self._down_since is not None:
            down_s = self._clock() - self._down_since
            self._down_since = None
            log.info("the job store answers again", extra={"down_s": round(down_s, 3)})

    def detail(self) -> dict[str, Any]:
        if self._down_since is None:
            return {"reachable": True}
        return {
            "reachable": False,
            "reason": f"{UNREACHABLE} ({self._reason})",
            "down_s": round(self._clock() - self._down_since, 3),
        }
