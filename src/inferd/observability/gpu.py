"""GPU utilization and memory per device through NVML (`nvidia-ml-py`), at scrape time.

Present only when a GPU is: without the library, or without a device, the collector yields
nothing and costs nothing after its first look.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Iterable
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


@functools.cache
def _nvml() -> Any | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
    except Exception:  # NVMLError: no driver, no device
        return None
    return pynvml


class GpuCollector(Collector):
    def __init__(self) -> None:
        self._nvml = _nvml()

    @property
    def present(self) -> bool:
        return self._nvml is not None

    def collect(self) -> Iterable[Metric]:
        nvml = self._nvml
        if nvml is None:
            return
        utilization = GaugeMetricFamily(
            "inferd_gpu_utilization_ratio", "GPU busy share over the last sample", labels=["gpu"]
        )
        used = GaugeMetricFamily("inferd_gpu_memory_used_bytes", "GPU memory used", labels=["gpu"])
        total = GaugeMetricFamily(
            "inferd_gpu_memory_total_bytes", "GPU memory in all", labels=["gpu"]
        )
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                utilization.add_metric([str(index)], rates.gpu / 100.0)
                used.add_metric([str(index)], float(memory.used))
                total.add_metric([str(index)], float(memory.total))
        except Exception:
            log.exception("reading NVML failed; GPU metrics skipped for this scrape")
            return
        yield utilization
        yield used
        yield total


def device_memory_used(gpus: Collection[int]) -> dict[int, int]:
    """Device memory in use on each of `gpus` (by index), in bytes: a version's load is
    measured by the difference. Empty when `gpus` is (NVML is not even looked at), without
    NVML, or when reading it fails; a GPU that is not there is left out."""
    if not gpus:
        return {}
    nvml = _nvml()
    if nvml is None:
        return {}
    used: dict[int, int] = {}
    try:
        present = nvml.nvmlDeviceGetCount()
        for index in sorted(gpus):
            if 0 <= index < present:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                used[index] = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:
        log.exception("reading NVML failed; device memory not measured")
        return {}
    return used


def gpu_memory_mb() -> float | None:
    """Device memory in use on GPU 0, for log lines; None without a GPU."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0))
        return float(info.used) / 2**20
    except Exception:
        return None


def gpu_memory_fraction() -> float | None:
    """Share of GPU 0's memory in use; None without a GPU."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0))
        return float(info.used) / float(info.total)
    except Exception:
        return None
