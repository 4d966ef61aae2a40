"""The ONNX Runtime session wrapper, on real small models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd.config.model import RuntimeOptions
from inferd.errors import InvalidInputError
from inferd.runtime.onnx_session import ModelLoadError, OnnxSession, resolve_providers
from tests.models import affine_model, lookup_model


def test_providers_fall_back_to_cpu() -> None:
    assert resolve_providers(["CUDAExecutionProvider"], ["CPUExecutionProvider"]) == [
        "CPUExecutionProvider"
    ]
    assert resolve_providers(
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
        ["CUDAExecutionProvider", "CPUExecutionProvider"],
    ) == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_memory_options_and_arena_shrink_after_a_large_run(tmp_path: Path) -> None:
    path = affine_model(tmp_path / "1" / "model.onnx")
    options = RuntimeOptions(memory_arena=True, memory_pattern=False, arena_shrink_above_elements=8)
    session = OnnxSession(path, options)
    small = session.run({"x": np.ones((1, 4), np.float32)})  # under the bound
    large = session.run({"x": np.ones((64, 4), np.float32)})  # over it: shrinks after
    np.testing.assert_array_equal(small["y"], np.full((1, 4), 3.0))
    np.testing.assert_array_equal(large["y"], np.full((64, 4), 3.0))
    assert session.inputs[0].dim_names == ("batch", None)


def test_errors_are_translated(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"nope")
    with pytest.raises(ModelLoadError) as info:
        OnnxSession(bad, RuntimeOptions())
    assert str(tmp_path) not in str(info.value)  # no server paths in what clients may see
    session = OnnxSession(lookup_model(tmp_path / "lookup.onnx"), RuntimeOptions())
    with pytest.raises(InvalidInputError):
        session.run({"idx": np.array([[99]], dtype=np.int64)})


def test_an_instance_placed_on_a_gpu_never_falls_back_to_the_cpu(tmp_path: Path) -> None:
    # This machine has no GPU (the CPU build of onnxruntime): a GPU instance fails its load
    # with an error that says why, instead of running on the CPU unnoticed.
    path = affine_model(tmp_path / "1" / "model.onnx")
    options = RuntimeOptions(
        providers=("CUDAExecutionProvider", "CPUExecutionProvider"), device_id=1
    )
    with pytest.raises(ModelLoadError, match="GPU 1 needs a GPU provider"):
        OnnxSession(path, options)
