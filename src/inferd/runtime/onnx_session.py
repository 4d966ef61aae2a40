"""One ONNX Runtime session: the only module of inferd that imports onnxruntime.

Builds session options from `RuntimeOptions`, picks providers in order of preference with CPU as
the fallback, reads input and output specs from the file, and translates ONNX Runtime's errors
into inferd's error tree at this one boundary. The IO bindings of its in-place runs are kept
by `bindings`, which works on them without importing onnxruntime.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from inferd.config.model import RuntimeOptions
from inferd.errors import InternalError, InvalidInputError, OutOfMemoryError
from inferd.runtime.bindings import KeptBindings
from inferd.runtime.datatypes import v2_from_onnx_type
from inferd.runtime.device_memory import OrtMemory
from inferd.runtime.placement import (
    CPU_PROVIDER,
    GPU_PROVIDERS,
    confined_threads,
    provider_options,
    resolve_providers,
)
from inferd.runtime.protocol import Array, Bound, DeviceArray, Repeat, TensorSpec
from inferd.runtime.reduction import GRAPH_MASK, GRAPH_POOLED, GRAPH_STATES, POOLED, Reduction

log = logging.getLogger(__name__)

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

_OOM_MARKERS = (
    "failed to allocate memory",
    "bad_alloc",
    "out of memory",
    "cudaerrormemoryallocation",
    "is smaller than requested bytes",  # the CUDA arena at its gpu_mem_limit
)


class ModelLoadError(Exception):
    """A model file could not be turned into a session. The message is safe to report."""


def _spec(arg: ort.NodeArg) -> TensorSpec:
    dims: list[int] = []
    names: list[str | None] = []
    for dim in arg.shape or ():
        if isinstance(dim, int) and dim >= 0:
            dims.append(dim)
            names.append(None)
        else:
            dims.append(-1)
            names.append(dim if isinstance(dim, str) and dim else None)
    return TensorSpec(
        name=arg.name,
        datatype=v2_from_onnx_type(arg.type),
        shape=tuple(dims),
        dim_names=tuple(names),
    )


_PRELOADED = False


def _preload_cuda_libraries() -> None:
    """Loads the CUDA and cuDNN libraries that NVIDIA's wheels install (nvidia-cublas,
    nvidia-cudnn-cu13, ...), which the dynamic loader does not search: ONNX Runtime's own
    `preload_dlls`, once, before the first GPU session. Without it the CUDA provider finds
    them only on LD_LIBRARY_PATH, and falls back to the CPU."""
    global _PRELOADED
    preload = getattr(ort, "preload_dlls", None)
    if _PRELOADED or preload is None:
        return
    _PRELOADED = True
    try:
        preload(cuda=True, cudnn=True, msvc=False)
    except Exception as exc:  # libraries on the loader's path serve instead
        log.warning("CUDA libraries not preloaded", extra={"reason": _first_line(exc)})


def _require_gpu(providers: Sequence[str], options: RuntimeOptions) -> None:
    """An instance placed on a GPU loads there or not at all (no silent CPU fallback)."""
    if options.device_id is not None and not any(p in GPU_PROVIDERS for p in providers):
        raise ModelLoadError(
            f"an instance for GPU {options.device_id} needs a GPU provider "
            f"({', '.join(p for p in options.providers if p != CPU_PROVIDER)}), and this "
            f"onnxruntime build has {', '.join(ort.get_available_providers())} "
            "(install onnxruntime-gpu on a machine with CUDA)"
        )


def _session_options(options: RuntimeOptions) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.intra_op_threads or confined_threads() or 0
    so.inter_op_num_threads = options.inter_op_threads
    so.graph_optimization_level = _OPT_LEVELS[options.graph_optimization_level]
    so.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL
        if options.execution_mode == "parallel"
        else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    spinning = "1" if options.allow_spinning else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    so.add_session_config_entry("session.inter_op.allow_spinning", spinning)
    stop = "1" if options.stop_spinning_after_run else "0"
    so.add_session_config_entry("session.force_spinning_stop", stop)
    so.enable_cpu_mem_arena = options.memory_arena
    so.enable_mem_pattern = options.memory_pattern
    so.log_severity_level = 3  # errors only: ORT's own warnings are not ours to print per run
    return so


class OnnxSession:
    """A `Runtime` backed by one `onnxruntime.InferenceSession`."""

    def __init__(self, path: Path, options: RuntimeOptions) -> None:
        providers = resolve_providers(options.providers, ort.get_available_providers())
        _require_gpu(providers, options)
        if any(p in GPU_PROVIDERS for p in providers):
            _preload_cuda_libraries()
        each = [provider_options(p, options) for p in providers]
        self._open = functools.partial(
            ort.InferenceSession,
            sess_options=_session_options(options),
            providers=providers,
            provider_options=each,
        )
        """Opens a session as this one (a reduction's graph on the same device)."""
        try:
            self._session = self._open(str(path))
        except Exception as exc:  # ORT raises its own pybind types and plain RuntimeError
            detail = _first_line(exc).replace(str(path), path.name)  # no internal paths
            raise ModelLoadError(f"onnxruntime cannot load {path.name}: {detail}") from exc
        try:
            self._inputs = tuple(_spec(a) for a in self._session.get_inputs())
            self._outputs = tuple(_spec(a) for a in self._session.get_outputs())
        except ValueError as exc:
            raise ModelLoadError(str(exc)) from exc
        self._providers = tuple(self._session.get_providers())
        if options.device_id is not None and not any(p in GPU_PROVIDERS for p in self._providers):
            # the GPU provider is installed but could not start (no driver, no CUDA libraries):
            # ONNX Runtime fell back to the CPU, which a GPU instance must not do
            raise ModelLoadError(
                f"the instance for GPU {options.device_id} could not start a GPU provider "
                f"(the session runs on {', '.join(self._providers)}): check the driver and "
                "CUDA libraries"
            )
        self._shrink_above = options.arena_shrink_above_elements
        self._bindings = KeptBindings(ort.OrtValue.ortvalue_from_numpy)
        """In-place runs' bindings, kept for the next run on the same buffers."""
        self._shrink = ort.RunOptions()
        gpu = f"gpu:{options.device_id or 0}"
        on_gpu = any(p in GPU_PROVIDERS for p in self._providers)
        devices = ["cpu:0"] + ([gpu] if "CUDAExecutionProvider" in self._providers else [])
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", ";".join(devices))
        device, device_id = ("cuda" if on_gpu else "cpu"), options.device_id or 0

        def allocate(shape: tuple[int, ...], dtype: np.dtype[np.generic]) -> tuple[int, object]:
            value = ort.OrtValue.ortvalue_from_shape_and_type(
                list(shape), dtype.type, device, device_id
            )
            return value.data_ptr(), value

        self._memory = OrtMemory(device, device_id, allocate)
        self._device = (device, device_id)
        self._reductions: dict[bytes, Any] = {}
        """Each reduction graph's session (inferd.runtime.reduction), opened on first use."""
        self.host_bytes = 0
        """Bytes of host arrays the runs read or returned: on a GPU instance what crossed the
        bus with them (arrays in `memory` are bound where they lie and do not count)."""

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
    def memory(self) -> OrtMemory:
        return self._memory

    def run(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        # None: every output; an empty list: none (a step whose outputs all go `into` its inputs)
        names = [o.name for o in self._outputs] if output_names is None else list(output_names)
        run_options = self._run_options(feeds)
        with _translated_errors():
            if into or any(isinstance(a, DeviceArray) for a in feeds.values()):
                return self._run_into(feeds, names, into or {})
            if not names:
                return {}  # (ONNX Runtime reads an empty list as every output)
            results = self._session.run(names, dict(feeds), run_options)
        self.host_bytes += sum(a.nbytes for a in feeds.values())
        self.host_bytes += sum(r.nbytes for r in results if isinstance(r, np.ndarray))
        return dict(zip(names, results, strict=True))

    def _run_options(self, feeds: Bound) -> Any:
        """An unusually large batch's: its memory returned after the run; None otherwise."""
        if (
            self._shrink_above is not None
            and max(a.size for a in feeds.values()) > self._shrink_above
        ):
            return self._shrink
        return None

    def run_reduced(self, feeds: Bound, reduction: Reduction) -> dict[str, Array]:
        """`reduction` of the batch's output where it lies: the model's output bound on this
        instance's device and its graph run there on it, only the reduced rows returned; the
        host's reduction of the returned output where the reduction has no graph."""
        spec = next((o for o in self._outputs if o.name == reduction.output), None)
        graph = None if spec is None else reduction.graph(spec.datatype)
        if graph is None or any(isinstance(a, DeviceArray) for a in feeds.values()):
            return reduction(feeds, self.run(feeds, [reduction.output]))
        with _translated_errors():
            head = self._reductions.get(graph)
            if head is None:
                head = self._reductions.setdefault(graph, self._open(graph))
            device, device_id = self._device
            binding = self._session.io_binding()
            for name, array in feeds.items():
                binding.bind_cpu_input(name, np.ascontiguousarray(array))
            binding.bind_output(reduction.output, device, device_id)
            self._session.run_with_iobinding(binding, self._run_options(feeds))
            (states,) = binding.get_outputs()
            reduce = head.io_binding()
            reduce.bind_ortvalue_input(GRAPH_STATES, states)
            reduce.bind_cpu_input(GRAPH_MASK, np.ascontiguousarray(feeds[reduction.mask]))
            reduce.bind_output(GRAPH_POOLED, "cpu")
            head.run_with_iobinding(reduce)
            (pooled,) = reduce.copy_outputs_to_cpu()
        self.host_bytes += sum(a.nbytes for a in feeds.values()) + pooled.nbytes
        return {POOLED: pooled}

    def run_steps(
        self,
        feeds: Bound,
        output_names: Sequence[str] | None,
        into: Mapping[str, str] | None,
        repeat: Repeat,
    ) -> dict[str, Array]:
        """Runs up to `repeat.steps` times, `repeat.between(k)` after run k. Steps that return
        nothing (their outputs all go `into` its inputs) are bound once: ONNX Runtime reads the
        bound arrays' own memory, so what `between` changes in place is the next run's
        input, and the runs after the first cost only the runtime's own work."""
        if not into or output_names is None or list(output_names):
            for k in range(repeat.steps):
                out = self.run(feeds, output_names, into)
                if not repeat.between(k):
                    break
            return out
        with _translated_errors():
            key, binding, kept = self._bindings.take(feeds, [], into, self._session.io_binding)
            try:
                for k in range(repeat.steps):
                    self._session.run_with_iobinding(binding)
                    self.host_bytes += kept.host_bytes
                    if not repeat.between(k):
                        break
            finally:
                self._bindings.keep(key, kept)
        return {}

    def _run_into(
        self, feeds: Bound, names: list[str], into: Mapping[str, str]
    ) -> dict[str, Array]:
        """Outputs in `into` (output -> input name) are written into that input's own array
        (CPU memory, bound once as both), not returned; the others are returned as usual.

        A decoder runs this every step on the same buffers: the binding of those buffers is
        kept (`_bindings`, keyed by their memory and shape) and only the small inputs whose
        memory changed and the returned outputs are bound again (`KeptBindings.take`)."""
        returned = [n for n in names if n not in into]
        key, binding, kept = self._bindings.take(feeds, returned, into, self._session.io_binding)
        try:
            self._session.run_with_iobinding(binding)
        finally:
            self._bindings.keep(key, kept)
        self.host_bytes += kept.host_bytes
        if not returned:
            return {}
        # in the order first bound (binding a name again keeps its place)
        outputs = dict(zip([*into, *returned], binding.get_outputs(), strict=True))
        results = {name: outputs[name].numpy() for name in returned}
        self.host_bytes += sum(r.nbytes for r in results.values())
        return results

    def close(self) -> None:
        # InferenceSession frees its memory when dropped; drop our references now.
        self.__dict__.pop("_session", None)
        self._reductions.clear()
        self._bindings.clear()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


@contextlib.contextmanager
def _translated_errors() -> Iterator[None]:
    """ONNX Runtime's errors as inferd's: the model's rejection of an input (4xx), out of
    memory, any other failure."""
    try:
        yield
    except (ort_state.InvalidArgument, ort_state.InvalidGraph) as exc:
        raise InvalidInputError(f"the model rejected the input: {_first_line(exc)}") from exc
    except Exception as exc:
        message = _first_line(exc)
        if any(marker in message.lower() for marker in _OOM_MARKERS):
            raise OutOfMemoryError("out of memory while running the model") from exc
        raise InternalError("the model failed while running") from exc
