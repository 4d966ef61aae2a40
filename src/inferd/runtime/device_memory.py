"""A runtime instance's own memory for the buffers its runs reuse: allocated by ONNX Runtime
on the instance's device (`OrtValue` on cuda:N, or on the CPU for a CPU instance), bound to
runs by address, updated in place. A decoder's KV cache and its drawn tokens live there, so a
decode step on a GPU copies only the step's few small inputs to the device and its tokens
back, never the cache.

The copies between the host and that memory, and within it (a KV row moved when the batch is
compacted), are the only ones: `memmove` on the CPU, the CUDA runtime's `cudaMemcpy` on a GPU
(the library that ONNX Runtime's CUDA provider has loaded). Both count the bytes that cross
(`to_host_bytes`, `to_device_bytes`), the probe the tests and the GPU check read."""

from __future__ import annotations

import ctypes
import glob
import os
import site
import threading
from collections.abc import Callable

import numpy as np

from inferd.runtime.protocol import Array, DeviceArray

Allocate = Callable[[tuple[int, ...], np.dtype[np.generic]], tuple[int, object]]
"""Allocates an array on the device: its address, and the object that owns the memory (an
`OrtValue`, made by inferd.runtime.onnx_session, the one module that imports onnxruntime)."""

_H2D, _D2H, _D2D = 1, 2, 3  # cudaMemcpyKind


class DeviceMemoryError(RuntimeError):
    """The device's memory could not be used (no CUDA runtime library found, a failed copy)."""


class OrtMemory:
    """`DeviceMemory` on `device` (ONNX Runtime's name: cpu or cuda) number `device_id`."""

    def __init__(self, device: str, device_id: int, allocate: Allocate) -> None:
        self._allocate = allocate
        self._device = device
        self._device_id = device_id
        self._copier: _Copier = _CudaCopier(device_id) if device == "cuda" else _HostCopier()
        self.to_host_bytes = 0
        self.to_device_bytes = 0

    @property
    def device(self) -> str:
        return f"{self._device}:{self._device_id}" if self._device == "cuda" else self._device

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype[np.generic]) -> DeviceArray:
        dtype = np.dtype(dtype)
        address, owner = self._allocate(tuple(shape), dtype)
        array = DeviceArray(self._device, self._device_id, address, tuple(shape), dtype, owner)
        self._copier.zero(array.address, array.nbytes)
        return array

    def rows(self, buffer: Array | DeviceArray, start: int, stop: int) -> DeviceArray:
        return _mine(buffer).rows(start, stop)

    def write(self, target: Array | DeviceArray, values: Array) -> None:
        array = _mine(target)
        host = np.ascontiguousarray(np.broadcast_to(values, array.shape), dtype=array.dtype)
        self._copier.copy(array.address, host.ctypes.data, host.nbytes, _H2D)
        self.to_device_bytes += host.nbytes

    def read(self, source: Array | DeviceArray) -> Array:
        array = _mine(source)
        host = np.empty(array.shape, array.dtype)
        self._copier.copy(host.ctypes.data, array.address, host.nbytes, _D2H)
        self.to_host_bytes += host.nbytes
        return host

    def copy_prefix(self, buffer: Array | DeviceArray, dst: int, src: int, length: int) -> None:
        array = _mine(buffer)
        _, heads, capacity, dim = array.shape
        pitch = capacity * dim * array.dtype.itemsize  # one head's row of the buffer
        row = heads * pitch
        width = length * dim * array.dtype.itemsize
        if dst == src or width == 0:
            return
        self._copier.copy_2d(
            array.address + dst * row, array.address + src * row, pitch, width, heads
        )


def _mine(buffer: Array | DeviceArray) -> DeviceArray:
    if not isinstance(buffer, DeviceArray):
        raise TypeError("a host array handed to device memory")
    return buffer


class _Copier:
    def zero(self, address: int, size: int) -> None:
        raise NotImplementedError

    def copy(self, dst: int, src: int, size: int, kind: int) -> None:
        raise NotImplementedError

    def copy_2d(self, dst: int, src: int, pitch: int, width: int, height: int) -> None:
        raise NotImplementedError


class _HostCopier(_Copier):
    def zero(self, address: int, size: int) -> None:
        ctypes.memset(address, 0, size)

    def copy(self, dst: int, src: int, size: int, kind: int) -> None:
        ctypes.memmove(dst, src, size)

    def copy_2d(self, dst: int, src: int, pitch: int, width: int, height: int) -> None:
        for line in range(height):
            ctypes.memmove(dst + line * pitch, src + line * pitch, width)


class _CudaCopier(_Copier):
    """Copies through the CUDA runtime on the instance's device. Each call sets the device
    (the current device is per thread, and steps run on several threads) and waits for the
    copy: ONNX Runtime runs on its own stream, so the next run must find the copy done."""

    def __init__(self, device_id: int) -> None:
        self._device_id = device_id
        self._cuda = _cudart()

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise DeviceMemoryError(
                f"{what} on cuda:{self._device_id} failed (CUDA error {status})"
            )

    def _on_device(self) -> None:
        self._check(self._cuda.cudaSetDevice(self._device_id), "cudaSetDevice")

    def _done(self) -> None:
        self._check(self._cuda.cudaStreamSynchronize(None), "cudaStreamSynchronize")

    def zero(self, address: int, size: int) -> None:
        self._on_device()
        self._check(self._cuda.cudaMemset(ctypes.c_void_p(address), 0, size), "cudaMemset")
        self._done()

    def copy(self, dst: int, src: int, size: int, kind: int) -> None:
        self._on_device()
        status = self._cuda.cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src), size, kind)
        self._check(status, "cudaMemcpy")
        self._done()

    def copy_2d(self, dst: int, src: int, pitch: int, width: int, height: int) -> None:
        self._on_device()
        status = self._cuda.cudaMemcpy2D(
            ctypes.c_void_p(dst), pitch, ctypes.c_void_p(src), pitch, width, height, _D2D
        )
        self._check(status, "cudaMemcpy2D")
        self._done()


_CUDART: ctypes.CDLL | None = None
_CUDART_LOCK = threading.Lock()


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime library: the one ONNX Runtime's CUDA provider loaded (found by its
    name among the loaded libraries), else the one NVIDIA's wheels install."""
    global _CUDART
    with _CUDART_LOCK:
        if _CUDART is None:
            _CUDART = _load_cudart()
        return _CUDART


def _load_cudart() -> ctypes.CDLL:
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    for folder in [*site.getsitepackages(), site.getusersitepackages()]:
        names += sorted(
            glob.glob(os.path.join(folder, "nvidia", "**", "libcudart.so.*"), recursive=True)
        )
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        size, pointer = ctypes.c_size_t, ctypes.c_void_p
        lib.cudaSetDevice.argtypes = [ctypes.c_int]
        lib.cudaMemset.argtypes = [pointer, ctypes.c_int, size]
        lib.cudaMemcpy.argtypes = [pointer, pointer, size, ctypes.c_int]
        lib.cudaMemcpy2D.argtypes = [pointer, size, pointer, size, size, size, ctypes.c_int]
        lib.cudaStreamSynchronize.argtypes = [pointer]
        return lib
    raise DeviceMemoryError("no CUDA runtime library (libcudart) was found")
