"""How much of the machine jobs may take while clients are being served.

Jobs start only when no client request waits and run on the runtimes' lowest-priority
threads, yet a job running beside a client's request still slows it on a small machine
(`python benchmarks/jobs_bench.py`, two cores, half load: without a share, interactive p99
+13% while a backlog drains). So, while clients come, jobs also keep to a share of the time: a
job whose work took t seconds (its preprocessing, inference and postprocessing, not its waits)
is followed by t * (1/share - 1) seconds without one. When no client request has come for a
while, jobs run back to back."""

from __future__ import annotations

import time
from collections.abc import Callable


class JobShare:
    def __init__(
        self,
        share: float,
        clients_idle_s: Callable[[], float],
        quiet_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`share` (0-1]: of the time while clients come; `clients_idle_s`: seconds since a
        client request last finished; `quiet_s`: with none for this long, no limit."""
        if not 0.0 < share <= 1.0:
            raise ValueError(f"a share is in (0, 1]; got {share}")
        self.share = share
        self._clients_idle_s = clients_idle_s
        self._quiet_s = quiet_s
        self._clock = clock
        self._free_at = 0.0

    def ready(self) -> bool:
        """Whether a job may start now."""
        return self._clients_idle_s() >= self._quiet_s or self._clock() >= self._free_at

    def spent(self, seconds: float) -> None:
        """A job's work took `seconds`: the pause it owes, after any still owed."""
        if self.share < 1.0:
            now = self._clock()
            self._free_at = max(self._free_at, now) + seconds * (1.0 / self.share - 1.0)
