"""The narrow runtime interface: tensor specs and `run(feeds) -> outputs`. No onnxruntime here."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.generic]
Feeds = Mapping[str, Array]


@dataclass(frozen=True, eq=False, slots=True)
class DeviceArray:
    """An array in a runtime instance's own memory (inferd.runtime.memory): on its GPU for a
    CUDA instance, on the host for a CPU one. Runs bind it by address, so a buffer that steps
    reuse (a decoder's KV cache, its drawn tokens) stays where the model runs and is never
    copied per run. `rows` views share the memory; `owner` keeps it alive."""

    device: str
    """ONNX Runtime's device name: cpu or cuda."""
    device_id: int
    address: int
    shape: tuple[int, ...]
    dtype: np.dtype[np.generic]
    owner: object

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def rows(self, start: int, stop: int) -> DeviceArray:
        """Rows [start, stop) of the leading axis: a view of the same memory."""
        if not 0 <= start <= stop <= self.shape[0]:
            raise ValueError(f"rows [{start}, {stop}) outside {self.shape[0]}")
        row = self.nbytes // self.shape[0] if self.shape[0] else 0
        shape = (stop - start, *self.shape[1:])
        return DeviceArray(
            self.device, self.device_id, self.address + start * row, shape, self.dtype, self.owner
        )


Bound = Mapping[str, "Array | DeviceArray"]
"""A run's inputs: host arrays, and arrays in the instance's own memory bound by address."""


class DeviceMemory(Protocol):
    """Where a decoder's reused buffers live (inferd.runtime.memory): the instance's device
    memory, or the host's. Reads and writes between the host and that memory are counted
    (`to_host_bytes`, `to_device_bytes`): what crosses the bus on a GPU."""

    @property
    def device(self) -> str:
        """cpu, or cuda:N; host for plain host arrays."""
        ...

    to_host_bytes: int
    to_device_bytes: int

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype[np.generic]) -> Array | DeviceArray: ...

    def rows(self, buffer: Array | DeviceArray, start: int, stop: int) -> Array | DeviceArray:
        """Rows [start, stop) of the leading axis: a view."""
        ...

    def write(self, target: Array | DeviceArray, values: Array) -> None:
        """Host values into the buffer (of its shape, or broadcast to it)."""
        ...

    def read(self, source: Array | DeviceArray) -> Array:
        """The buffer's values, on the host (a new array)."""
        ...

    def copy_prefix(self, buffer: Array | DeviceArray, dst: int, src: int, length: int) -> None:
        """`buffer[dst, :, :length] = buffer[src, :, :length]` for a [rows, heads, capacity,
        head_dim] buffer, within its memory."""
        ...


@dataclass(frozen=True)
class TensorSpec:
    """An input or output as the model sees it.

    `shape` is the full shape (batch axis included when the model has one), -1 for a variable
    dimension. `dim_names` gives the symbolic name of each dimension where the file has one
    (e.g. "batch", "sequence"), which links an output axis to the input axis it follows.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    dim_names: tuple[str | None, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Repeat:
    """The same run up to `steps` times back to back, on one instance's thread, with
    `between(k)` called there after run k (it may change the feeds in place for the next run;
    False: no more runs): a decoder's block of steps costs one handoff to the runtime's
    thread, not one a step, and the steps follow each other as closely as bare ONNX
    Runtime's would."""

    steps: int
    between: Callable[[int], bool]


Head = Callable[[Bound, dict[str, Array]], dict[str, Array]]
"""What a batch's outputs become before they leave the runtime's thread: `(feeds, outputs) ->
outputs`, run right after the session on the same thread (a task's reduction of the whole
batch, such as an embedding's pooling, vectorized and off the event loop)."""


class Runtime(Protocol):
    """One loaded model instance. `run` is blocking and thread-safe to call from a worker thread."""

    @property
    def inputs(self) -> tuple[TensorSpec, ...]: ...

    @property
    def outputs(self) -> tuple[TensorSpec, ...]: ...

    @property
    def providers(self) -> tuple[str, ...]: ...

    @property
    def memory(self) -> DeviceMemory:
        """The instance's own memory (its device's), for buffers its runs bind by address."""
        ...

    def run(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        """`output_names`: the outputs wanted (None: all of them). `into` maps outputs to
        inputs whose arrays they are written into, in place (a decoder's KV cache); those
        outputs are not returned, so a step whose outputs all go `into` its inputs asks for
        none (an empty list) and gets an empty dict."""
        ...

    def run_steps(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None,
        into: Mapping[str, str] | None,
        repeat: Repeat,
    ) -> dict[str, Array]:
        """`run` up to `repeat.steps` times on `feeds`, which `repeat.between(k)` may change
        in place after run k for the next; the last run's outputs."""
        ...

    def close(self) -> None: ...
