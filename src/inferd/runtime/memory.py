"""Host memory for a decoder's reused buffers: plain numpy arrays, which a run binds from the
host. On a CPU instance that is where the model runs; on a GPU instance ONNX Runtime copies
them to the device and back on every run (`generation.cache_placement: host`, the baseline
that inferd.runtime.device_memory's device-resident buffers are measured against).

Imports no onnxruntime: the generation part builds its buffers through this interface."""

from __future__ import annotations

import numpy as np

from inferd.runtime.protocol import Array, DeviceArray


class HostMemory:
    """`DeviceMemory` over numpy arrays. Nothing crosses a bus here, but what a GPU run would
    copy is what the runtime counts (OnnxSession.host_bytes)."""

    device = "host"

    def __init__(self) -> None:
        self.to_host_bytes = 0
        self.to_device_bytes = 0

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype[np.generic]) -> Array:
        return np.zeros(shape, dtype)

    def rows(self, buffer: Array | DeviceArray, start: int, stop: int) -> Array:
        return _host(buffer)[start:stop]

    def write(self, target: Array | DeviceArray, values: Array) -> None:
        _host(target)[...] = values

    def read(self, source: Array | DeviceArray) -> Array:
        return _host(source).copy()

    def copy_prefix(self, buffer: Array | DeviceArray, dst: int, src: int, length: int) -> None:
        array = _host(buffer)
        array[dst, :, :length] = array[src, :, :length]


def _host(buffer: Array | DeviceArray) -> Array:
    if isinstance(buffer, DeviceArray):
        raise TypeError("a device array handed to host memory")
    return buffer
