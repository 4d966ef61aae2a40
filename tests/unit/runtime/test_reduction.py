"""An embedding's pooling reduced where the batch ran (inferd.runtime.reduction): the shipped
graphs are scripts/build_heads.py's output; an ONNX Runtime instance runs the mean on its own
device (here the CPU, the same path as a GPU's), the token states bound where the model left
them and never returned to the host (counted by the session's probe, `host_bytes`), with the
vectors the host's reduction gives, padding that holds inf or NaN included."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from inferd.config.model import RuntimeOptions
from inferd.runtime.onnx_session import OnnxSession
from inferd.runtime.reduction import HEADS, POOLED, Reduction

ROOT = Path(__file__).resolve().parents[3]
VOCAB, HIDDEN = 16, 8


def _build_heads() -> object:
    spec = importlib.util.spec_from_file_location("build_heads", ROOT / "scripts/build_heads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_graphs_are_the_scripts(tmp_path: Path) -> None:
    written = _build_heads().build(tmp_path)  # type: ignore[attr-defined]
    assert sorted(p.name for p in written) == sorted(p.name for p in HEADS.glob("*.onnx"))
    for path in written:
        assert onnx.load(str(path)).graph == onnx.load(str(HEADS / path.name)).graph


def encoder(folder: Path, dtype: int) -> Path:
    """token states = a table's rows (row 0, the padding id's, all NaN), of `dtype`."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    table[0] = np.nan
    np_type = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    weights = helper.make_tensor(
        "table", dtype, table.shape, table.astype(np_type).tobytes(), raw=True
    )
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"])],
        "states",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch", "sequence"]
            ),
        ],
        [helper.make_tensor_value_info("last_hidden_state", dtype, ["batch", "sequence", HIDDEN])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16])
@pytest.mark.parametrize("mode", ["mean", "cls"])
def test_an_instance_reduces_on_its_device_as_the_host_does(
    tmp_path: Path, dtype: int, mode: str
) -> None:
    session = OnnxSession(encoder(tmp_path, dtype), RuntimeOptions())
    lengths = [3, 1, 5]
    ids = np.zeros((3, 5), np.int64)  # padding: id 0, whose states are NaN
    for row, n in enumerate(lengths):
        ids[row, :n] = np.arange(1, n + 1) + row
    feeds = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}
    reduction = Reduction("last_hidden_state", "attention_mask", mode)
    assert (reduction.graph("FP32" if dtype == TensorProto.FLOAT else "FP16") is None) == (
        mode == "cls"
    )
    before = session.host_bytes
    reduced = session.run_reduced(feeds, reduction)
    crossed = session.host_bytes - before
    states = session.run(feeds, ["last_hidden_state"])["last_hidden_state"]
    expected = reduction(feeds, {"last_hidden_state": states})[POOLED]
    assert set(reduced) == {POOLED} and reduced[POOLED].dtype == np.float32
    assert np.isfinite(reduced[POOLED]).all()
    np.testing.assert_allclose(reduced[POOLED], expected, rtol=1e-3, atol=1e-3)
    for row, n in enumerate(lengths):  # each row its own tokens' mean (or its first token)
        own = states[row, :n].astype(np.float64)
        want = own.mean(axis=0) if mode == "mean" else own[0]
        np.testing.assert_allclose(reduced[POOLED][row], want, rtol=1e-3, atol=1e-3)
    inputs = sum(a.nbytes for a in feeds.values())
    if mode == "mean":  # the states stayed where the model left them: only the rows came back
        assert crossed == inputs + reduced[POOLED].nbytes
    else:  # a CLS's token is picked on the host, from the states returned
        assert crossed == inputs + states.nbytes
    session.close()
