"""Admission by memory: refuse new requests while the process (or the GPU) is over its limit,
so that what was admitted can finish instead of everything failing together."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

from inferd.errors import UnavailableError
from inferd.observability.gpu import gpu_memory_fraction

_PAGE = os.sysconf("SC_PAGE_SIZE")


def release_freed() -> None:
    """Returns the C heap's free pages to the system (glibc's malloc_trim; elsewhere nothing):
    what an unloaded model's runtime freed then leaves the process's resident memory instead
    of waiting in the allocator for the next load. Blocking (a few milliseconds)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def resident_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 where it cannot be read)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class MemoryGate:
    """Checks at most every `interval_s`; reading /proc on every request would cost more."""

    def __init__(self, max_mb: int, max_gpu_fraction: float, interval_s: float = 0.1) -> None:
        self._max_bytes = max_mb * 2**20
        self._max_gpu = max_gpu_fraction
        self._interval_s = interval_s
        self._checked_at = 0.0
        self._over: str | None = None

    @property
    def enabled(self) -> bool:
        return self._max_bytes > 0 or self._max_gpu > 0

    def refusal(self) -> UnavailableError | None:
        """5030 while over a limit (measured at most every interval), else None."""
        if not self.enabled:
            return None
        now = time.monotonic()
        if now - self._checked_at >= self._interval_s:
            self._checked_at = now
            self._over = self._measure()
        return None if self._over is None else UnavailableError(self._over, retry_after_s=1.0)

    def _measure(self) -> str | None:
        if self._max_bytes:
            rss = resident_bytes()
            if rss > self._max_bytes:
                return (
                    f"the server is over its memory limit ({rss / 2**20:.0f} MB of "
                    f"{self._max_bytes / 2**20:.0f} MB); retry shortly"
                )
        if self._max_gpu:
            share = gpu_memory_fraction()
            if share is not None and share > self._max_gpu:
                return f"GPU memory is {share:.0%} used, over the limit of {self._max_gpu:.0%}"
        return None
