"""ONNX Runtime as the preparation tools use it: a plain CPU session, a runner, a stopwatch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inferd.prep.parity import Feeds, Runner
from inferd.runtime.protocol import TensorSpec


def session(path: Path, optimize: bool = True) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:  # compare graphs as written, not as ONNX Runtime rewrites them at load
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def runner(sess: ort.InferenceSession, outputs: Sequence[str] | None = None) -> Runner:
    names = list(outputs) if outputs else None
    accepted = {i.name for i in sess.get_inputs()}

    def run(feeds: Feeds) -> list[np.ndarray]:
        return list(sess.run(names, {k: v for k, v in feeds.items() if k in accepted}))

    return run


def output_names(sess: ort.InferenceSession) -> list[str]:
    return [o.name for o in sess.get_outputs()]


def output_specs(sess: ort.InferenceSession) -> list[TensorSpec]:
    """The outputs as the serving tasks see them (symbolic dims as -1, with their names)."""
    specs = []
    for o in sess.get_outputs():
        dims = [d if isinstance(d, int) else -1 for d in o.shape]
        names = [d if isinstance(d, str) else None for d in o.shape]
        specs.append(TensorSpec(o.name, o.type, tuple(dims), tuple(names)))
    return specs


def input_dtypes(sess: ort.InferenceSession) -> dict[str, str]:
    kinds = {
        "tensor(float)": "float32",
        "tensor(int64)": "int64",
        "tensor(int32)": "int32",
        "tensor(float16)": "float16",
        "tensor(double)": "float64",
        "tensor(bool)": "bool",
    }
    return {i.name: kinds.get(i.type, "float32") for i in sess.get_inputs()}
