"""The ONNX Runtime session wrapper, on real small models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from inferd.config.model import RuntimeOptions
from inferd.errors import InvalidInputError
from inferd.runtime.onnx_session import ModelLoadError, OnnxSession
from inferd.runtime.placement import resolve_providers
from inferd.runtime.protocol import Repeat
from tests.models import affine_model, lookup_model


def _session(
    path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[str],
    outputs: list[str],
    dims: list[str | int],
    initializers: list[onnx.TensorProto] | None = None,
) -> OnnxSession:
    """A float graph of `nodes` whose inputs and outputs all have `dims`, saved at `path`."""

    def info(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)

    graph = helper.make_graph(
        nodes, path.stem, [info(n) for n in inputs], [info(n) for n in outputs], initializers
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return OnnxSession(path, RuntimeOptions())


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


def test_outputs_written_into_inputs_are_not_returned_and_none_asked_means_none(
    tmp_path: Path,
) -> None:
    # x -> (y = x + 1, z = 2x); y written into x's own array, as a decoder's step writes its
    # cache and its drawn tokens: asking for no outputs returns none (not all of them)
    one = numpy_helper.from_array(np.ones((1, 2), np.float32), "one")
    nodes = [
        helper.make_node("Add", ["x", "one"], ["y"]),
        helper.make_node("Add", ["x", "x"], ["z"]),
    ]
    session = _session(tmp_path / "into.onnx", nodes, ["x"], ["y", "z"], ["batch", 2], [one])
    state = np.zeros((3, 2), np.float32)
    assert session.run({"x": state}, [], {"y": "x"}) == {}
    assert session.run({"x": state}, [], {"y": "x"}) == {}
    np.testing.assert_array_equal(state, np.full((3, 2), 2.0))  # written in place, twice
    returned = session.run({"x": state}, ["z"], {"y": "x"})
    assert list(returned) == ["z"]
    np.testing.assert_array_equal(returned["z"], np.full((3, 2), 4.0))  # from x before the step
    np.testing.assert_array_equal(state, np.full((3, 2), 3.0))
    everything = session.run({"x": np.zeros((1, 2), np.float32)})
    assert sorted(everything) == ["y", "z"]
    assert session.run({"x": np.zeros((1, 2), np.float32)}, []) == {}  # without `into` too


@pytest.mark.parametrize("asked", [[], ["twice"]])
def test_steps_run_back_to_back_on_feeds_changed_in_place_between_them(
    tmp_path: Path, asked: list[str]
) -> None:
    # state <- state + step (in place), as a decoder's block of steps: `between` changes the
    # small input in place and the next run reads it; returning False ends the steps. With
    # no output asked the steps are bound once; with one asked each run binds again.
    nodes = [
        helper.make_node("Add", ["state", "step"], ["after"]),
        helper.make_node("Add", ["state", "state"], ["twice"]),
    ]
    session = _session(
        tmp_path / "steps.onnx", nodes, ["state", "step"], ["after", "twice"], ["rows", 1]
    )
    feeds = {"state": np.zeros((2, 1), np.float32), "step": np.ones((2, 1), np.float32)}
    seen: list[float] = []

    def between(k: int) -> bool:
        seen.append(float(feeds["state"][0, 0]))
        feeds["step"][:] = k + 2
        return k < 2

    out = session.run_steps(feeds, asked, {"after": "state"}, Repeat(5, between))
    assert seen == [1.0, 3.0, 6.0]  # 0+1, +2, +3: three runs, then `between` said stop
    assert sorted(out) == asked
    if asked:
        np.testing.assert_array_equal(out["twice"], np.full((2, 1), 6.0))  # the last run's


def test_a_kept_binding_reads_small_inputs_written_in_place_and_rebinds_new_ones(
    tmp_path: Path,
) -> None:
    # state <- state + step, the state bound once as input and output (a decoder's cache).
    # Across calls a small input in the same memory is not bound again: what was written
    # there in place since is what the next run reads; a new array (other memory, or the
    # same memory seen with another shape) is bound again.
    nodes = [helper.make_node("Add", ["state", "step"], ["after"])]
    session = _session(tmp_path / "kept.onnx", nodes, ["state", "step"], ["after"], ["rows", 1])
    cache = np.zeros((2, 1), np.float32)
    small = np.ones((4, 1), np.float32)
    into = {"after": "state"}
    session.run({"state": cache, "step": small[:2]}, [], into)
    small[:2] = 5.0  # in place, between calls
    session.run({"state": cache, "step": small[:2]}, [], into)  # (a new view, same memory)
    np.testing.assert_array_equal(cache, np.full((2, 1), 6.0))
    session.run_steps(
        {"state": cache, "step": np.full((2, 1), 10.0, np.float32)},
        [],
        into,
        Repeat(2, lambda k: True),
    )
    np.testing.assert_array_equal(cache, np.full((2, 1), 26.0))  # a new array: bound again
    small[:] = 0.5
    session.run({"state": cache[:1], "step": small[:1]}, [], into)  # other shapes: bound anew
    np.testing.assert_array_equal(cache, [[26.5], [26.0]])
    assert len(session._bindings) == 2  # one for each view of the cache
