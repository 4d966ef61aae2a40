"""Device memory per GPU without NVML: nothing measured, and nothing paid for it.

This machine has no GPU; NVML's absence is made certain by hiding the `pynvml` module (an
import of it fails, as where `inferd[gpu]` is not installed)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from inferd.observability import gpu


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    gpu._nvml.cache_clear()
    yield
    gpu._nvml.cache_clear()  # (the next reader looks again, with the module back)


def test_no_gpu_asked_for_never_looks_for_nvml(no_nvml: None) -> None:
    assert gpu.device_memory_used(()) == {}
    assert gpu.device_memory_used(frozenset()) == {}
    assert gpu._nvml.cache_info().misses == 0


def test_without_nvml_nothing_is_measured_and_it_is_looked_for_once(no_nvml: None) -> None:
    for _ in range(3):
        assert gpu.device_memory_used({0, 1}) == {}
    info = gpu._nvml.cache_info()
    assert (info.misses, info.hits) == (1, 2)
    assert gpu.gpu_memory_mb() is None and not gpu.GpuCollector().present
