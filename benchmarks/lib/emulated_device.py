"""An emulated fast device: a runtime for benchmarks only that answers a batch of the real
model's output shape after a fixed time a row, sleeping (the GIL released, no CPU used), one
batch at a time as one device runs them. Like Triton's identity backend, it measures what the
server itself costs in front of a device of known speed: HTTP, bodies, tokenizing, batching,
answers, all real; only the model's run is stood in for.

The model file is opened by ONNX Runtime for its inputs and outputs only (never run). A
batch's pooled vectors (an embedding's mean, `run_reduced`) leave it already pooled, as the
mean's graph makes them on a GPU.

    python benchmarks/lib/emulated_device.py --row-ms 0.303 serve --repo REPO [inferd serve flags]

serves REPO as `inferd serve` does, every instance of every model on this device.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from inferd.runtime.onnx_session import OnnxSession
from inferd.runtime.protocol import Array, Bound, Repeat, TensorSpec
from inferd.runtime.reduction import POOLED, Reduction

DTYPES = {"FP32": np.float32, "FP16": np.float16, "INT64": np.int64, "INT32": np.int32}

CALIBRATIONS = {
    # the H200's measured rates, BERT-base, 600-character texts (benchmarks/gpu_check.py)
    "h200-fp32": 9.7 / 32,
    "h200-fp16": 6.2 / 32,
    "2x-h200-fp16": 6.2 / 32 / 2,
}
"""Milliseconds a row of each emulated device."""


class Device:
    """One device: batches run one at a time, `row_s` seconds a row, in the order they came;
    counts what it ran. A run waits for the device without holding the GIL and takes it back
    once, when its batch is done (as ONNX Runtime's run on a GPU does)."""

    def __init__(self, row_s: float) -> None:
        self.row_s = row_s
        self._lock = threading.Lock()
        self._free_at = 0.0
        self.rows = 0
        self.busy_s = 0.0

    def run(self, rows: int) -> None:
        took = rows * self.row_s
        with self._lock:  # (held for a few instructions, never while sleeping)
            done_at = max(time.perf_counter(), self._free_at) + took
            self._free_at = done_at
            self.rows += rows
            self.busy_s += took
        time.sleep(max(0.0, done_at - time.perf_counter()))  # the GIL released meanwhile


class EmulatedRuntime:
    """A `Runtime` (inferd.runtime.protocol) of the model file's inputs and outputs whose runs
    take the device's time."""

    def __init__(self, path: Path, options: Any, device: Device) -> None:
        specs = OnnxSession(path, options)
        self._inputs, self._outputs = specs.inputs, specs.outputs
        self._memory = specs.memory
        # a GPU's: its runs hold no cores (inferd.runtime.placement.cores_held), so batches of
        # several instances queue on the device as they would on a GPU's
        self._providers = ("CUDAExecutionProvider", "CPUExecutionProvider")
        self._device = device
        self._values: dict[tuple[tuple[int, ...], str], Array] = {}

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self._inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self._outputs

    @property
    def providers(self) -> tuple[str, ...]:
        return self._providers

    @property
    def memory(self) -> Any:
        return self._memory

    def _value(self, shape: tuple[int, ...], datatype: str) -> Array:
        """Values of `shape` that are not all zero (a zero vector cannot be normalized)."""
        key = (shape, datatype)
        value = self._values.get(key)
        if value is None:
            count = int(np.prod(shape))
            value = (np.arange(count, dtype=np.float32) % 7 + 1).reshape(shape)
            self._values[key] = value = value.astype(DTYPES.get(datatype, np.float32))
        return value

    def _shape(self, spec: TensorSpec, feeds: Bound) -> tuple[int, ...]:
        sizes: dict[str, int] = {}
        for known in self._inputs:
            if known.name in feeds:
                for name, size in zip(known.dim_names, feeds[known.name].shape, strict=False):
                    if name is not None:
                        sizes[name] = size
        rows = next(iter(feeds.values())).shape[0]
        shape = []
        for axis, (size, name) in enumerate(zip(spec.shape, spec.dim_names, strict=True)):
            if size >= 0:
                shape.append(size)
            elif name is not None and name in sizes:
                shape.append(sizes[name])
            else:
                shape.append(rows if axis == 0 else 1)
        return tuple(shape)

    def run(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        if into:
            raise NotImplementedError("the emulated device runs encoders (no in-place outputs)")
        names = [o.name for o in self._outputs] if output_names is None else list(output_names)
        self._device.run(next(iter(feeds.values())).shape[0])
        specs = {o.name: o for o in self._outputs}
        return {n: self._value(self._shape(specs[n], feeds), specs[n].datatype) for n in names}

    def run_reduced(self, feeds: Bound, reduction: Reduction) -> dict[str, Array]:
        """The batch's pooled vectors, as the mean's graph returns them from a GPU."""
        rows = feeds[reduction.mask].shape[0]
        hidden = next(o for o in self._outputs if o.name == reduction.output).shape[-1]
        self._device.run(rows)
        return {POOLED: self._value((rows, hidden), "FP32")}

    def run_steps(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None,
        into: Mapping[str, str] | None,
        repeat: Repeat,
    ) -> dict[str, Array]:
        raise NotImplementedError("the emulated device runs encoders (no repeated steps)")

    def close(self) -> None:
        self._values.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row-ms", type=float, required=True, help="the device's time a row")
    ours, rest = parser.parse_known_args()
    from inferd.cli.main import build_parser
    from inferd.cli.serve import serve
    from inferd.config.server_settings import ServerSettings, load_server_settings

    args = build_parser().parse_args(rest)
    if args.command != "serve":
        parser.error("give `serve` and its flags")
    flags = {name: getattr(args, name) for name in ServerSettings.model_fields}
    settings = load_server_settings(args.config, os.environ, flags)
    device = Device(ours.row_ms / 1000)
    return serve(settings, lambda path, options: EmulatedRuntime(path, options, device))


if __name__ == "__main__":
    raise SystemExit(main())
