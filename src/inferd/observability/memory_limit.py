"""The memory this process may use, as a metric: the cgroup limit, else the machine's memory."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


def memory_limit_bytes() -> float:
    """The cgroup memory limit of this process (v2, then v1), or the machine's memory."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return float(text)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


class MemoryLimitCollector(Collector):
    def __init__(self) -> None:
        self._limit = memory_limit_bytes()

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "inferd_memory_limit_bytes", "Memory this process may use (cgroup limit, else RAM)"
        )
        gauge.add_metric([], self._limit)
        yield gauge
