"""The draw in the graph (inferd.prep.graph_draw), on a small graph whose ranked candidates come
straight from its inputs: it gives the token inferd's own sampling gives for the same numbers,
greedy rows take the best candidate, and a graph without fixed-width candidates is left alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from inferd.generation.decoder import NEXT_IDS, TOP_IDS, TOP_LOGITS
from inferd.generation.params import SamplingParams
from inferd.generation.sampling import draw_inputs
from inferd.prep.graph_draw import add_graph_draw, add_to_file, check_draw

WIDTH = 8


def ranked_graph(width: int | str = WIDTH) -> onnx.ModelProto:
    """Candidates in, the same candidates out (as a decoder's ranked outputs)."""
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["scores"], [TOP_LOGITS]),
            helper.make_node("Identity", ["ids"], [TOP_IDS]),
        ],
        "ranked",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", width]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", width]),
        ],
        [
            helper.make_tensor_value_info(TOP_LOGITS, TensorProto.FLOAT, ["batch", width]),
            helper.make_tensor_value_info(TOP_IDS, TensorProto.INT64, ["batch", width]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def draw(
    model: onnx.ModelProto,
    scores: list[list[float]],
    params: list[SamplingParams],
    uniforms: list[float],
) -> list[int]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    values = np.array(scores, dtype=np.float32)
    ids = np.tile(np.arange(100, 100 + WIDTH, dtype=np.int64), (len(scores), 1))
    feeds = {"scores": values, "ids": ids, **draw_inputs(params, np.array(uniforms), WIDTH)}
    out = session.run([NEXT_IDS], feeds)[0]
    assert out.shape == (len(scores), 1)
    return [int(t) for t in out[:, 0]]


def test_the_graph_draws_what_inferds_sampling_draws(tmp_path: Path) -> None:
    path = tmp_path / "ranked.onnx"
    onnx.save(ranked_graph(), str(path))
    assert add_to_file(path)
    assert not add_to_file(path)  # already there: left as it is
    assert check_draw(path, rows=2000, seed=1) == 0


def test_greedy_top_k_top_p_and_the_uniform_number() -> None:
    model = ranked_graph()
    assert add_graph_draw(model)
    onnx.checker.check_model(model)
    even = [[0.0] * WIDTH]  # eight equally likely candidates: the uniform number picks one
    hot = SamplingParams(4, temperature=1.0, top_k=WIDTH)
    assert draw(model, even * 3, [hot] * 3, [0.0, 0.5, 0.99]) == [100, 104, 107]
    assert draw(model, even, [SamplingParams(4, temperature=1.0, top_k=2)], [0.99]) == [101]
    assert draw(model, even, [SamplingParams(4, temperature=0.5, top_k=8, top_p=0.25)], [0.99]) == [
        101
    ]
    ranked = [[5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0]]
    greedy = SamplingParams(4, temperature=0.0)
    assert draw(model, ranked, [greedy], [0.99]) == [100]  # greedy: the best, whatever u is
    cold = SamplingParams(4, temperature=0.01, top_k=8)
    assert draw(model, ranked, [cold], [0.99]) == [100]  # all but the best weigh nothing


def test_a_graph_without_fixed_width_candidates_is_left_alone() -> None:
    assert not add_graph_draw(ranked_graph("width"))
    plain = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "plain",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
    )
    assert not add_graph_draw(plain)
