"""Draws the next token inside a decoder's own graph, from its ranked candidates
(inferd.prep.ranked_logits): each row's temperature, top-k and top-p, and a uniform number the
server draws from the row's own generator, in; the row's next token id, out (`next_ids`,
[batch, 1]). With it a decode step needs no sampling in Python, and the token it outputs can
go straight back in as the next step's input (inferd.generation.scheduler runs several steps
back to back that way).

The arithmetic is the one `inferd.generation.sampling` does on the candidates, in float64 and
in the same order: weights exp((score - best) / temperature), zero past the row's top-k, their
running sum, the smallest prefix whose mass reaches top_p, then the first candidate whose
running sum passes uniform x that prefix's mass. A temperature of 0 is greedy (the best
candidate). Both sides round every operation the same way except the exponential, whose
implementations may differ in the last bit: a draw can differ only where uniform x mass falls
within that rounding of a boundary between two candidates (about one draw in 10^15), and
`check_draw` compares the two on many random rows when the graph is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferd.generation.decoder import (
    DRAW_TEMPERATURE,
    DRAW_TOP_K,
    DRAW_TOP_P,
    DRAW_UNIFORM,
    NEXT_IDS,
    TOP_IDS,
    TOP_LOGITS,
)
from inferd.prep.ranked_logits import ranked_width


class _Nodes:
    """The draw's nodes and constants, named apart from the graph's own (`inferd_draw_...`)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.nodes: list[Any] = []

    def const(self, part: str, kind: int, shape: list[int], values: list[Any]) -> str:
        from onnx import helper

        self.graph.initializer.append(
            helper.make_tensor(f"inferd_draw_{part}", kind, shape, values)
        )
        return f"inferd_draw_{part}"

    def node(self, op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [f"inferd_draw_{out}"], **attrs))
        return f"inferd_draw_{out}"

    def column(self, value: str, axis: str, part: str) -> str:
        """[batch] -> [batch, 1]."""
        return self.node("Unsqueeze", [value, axis], part)

    def count(self, flags: str, axis: str, part: str) -> str:
        """The trues in each row, [batch, 1]."""
        from onnx import TensorProto

        as_int = self.node("Cast", [flags], f"{part}_int", to=TensorProto.INT64)
        return self.node("ReduceSum", [as_int, axis], part, keepdims=1)


def add_graph_draw(model: Any) -> bool:
    """Adds the draw to an onnx.ModelProto that has the ranked outputs, in place; False (nothing
    added) when they are missing, their width is not fixed, or the draw is already there."""
    from onnx import TensorProto, helper

    graph = model.graph
    width = ranked_width(model)
    if width == 0 or any(o.name == NEXT_IDS for o in graph.output):
        return False
    batch_dim = next(o for o in graph.output if o.name == TOP_LOGITS).type.tensor_type.shape.dim[0]
    batch = batch_dim.dim_param or batch_dim.dim_value or "batch"
    g = _Nodes(graph)
    node, const = g.node, g.const
    one_axis = const("axis1", TensorProto.INT64, [1], [1])
    scalar_axis = const("axis_scalar", TensorProto.INT64, [], [1])
    starts = const("zero", TensorProto.INT64, [1], [0])
    ends = const("one", TensorProto.INT64, [1], [1])
    zero_d = const("zero_d", TensorProto.DOUBLE, [], [0.0])
    one_d = const("one_d", TensorProto.DOUBLE, [], [1.0])
    one_i = const("one_i", TensorProto.INT64, [], [1])
    positions = const("positions", TensorProto.INT64, [1, width], list(range(width)))

    scores = node("Cast", [TOP_LOGITS], "scores", to=TensorProto.DOUBLE)
    best = node("Slice", [scores, starts, ends, one_axis], "best")
    temperature = g.column(DRAW_TEMPERATURE, one_axis, "temperature")
    greedy = node("Equal", [temperature, zero_d], "greedy")
    divisor = node("Where", [greedy, one_d, temperature], "divisor")
    shifted = node("Sub", [scores, best], "shifted")
    weights = node("Exp", [node("Div", [shifted, divisor], "scaled")], "exp")
    top_k = g.column(DRAW_TOP_K, one_axis, "top_k")
    inside = node("Less", [positions, top_k], "inside")
    weights = node("Where", [inside, weights, zero_d], "weights")
    running = node("CumSum", [weights, scalar_axis], "running")
    total = node("GatherElements", [running, node("Sub", [top_k, one_i], "last")], "total", axis=1)
    mass = node("Mul", [g.column(DRAW_TOP_P, one_axis, "top_p"), total], "mass")
    below = g.count(node("Less", [running, mass], "below_flags"), one_axis, "below")
    keep = node("Min", [node("Add", [below, one_i], "below_one"), top_k], "keep")
    keep_last = node("Sub", [keep, one_i], "keep_last")
    limit = node("GatherElements", [running, keep_last], "limit", axis=1)
    target = node("Mul", [g.column(DRAW_UNIFORM, one_axis, "uniform"), limit], "target")
    passed = g.count(node("LessOrEqual", [running, target], "passed_flags"), one_axis, "passed")
    pick = node("Min", [passed, keep_last], "pick")
    drawn = node("GatherElements", [TOP_IDS, pick], "drawn", axis=1)
    first = node("Slice", [TOP_IDS, starts, ends, one_axis], "first")
    g.nodes.append(helper.make_node("Where", [greedy, first, drawn], [NEXT_IDS]))
    graph.node.extend(g.nodes)
    _declare_io(graph, batch)
    return True


def _declare_io(graph: Any, batch: str | int) -> None:
    """The draw's inputs (a row's temperature, top-k, top-p and uniform number) and its
    output (the drawn token ids, [batch, 1])."""
    from onnx import TensorProto, helper

    graph.input.extend(
        [
            helper.make_tensor_value_info(DRAW_TEMPERATURE, TensorProto.DOUBLE, [batch]),
            helper.make_tensor_value_info(DRAW_TOP_K, TensorProto.INT64, [batch]),
            helper.make_tensor_value_info(DRAW_TOP_P, TensorProto.DOUBLE, [batch]),
            helper.make_tensor_value_info(DRAW_UNIFORM, TensorProto.DOUBLE, [batch]),
        ]
    )
    graph.output.append(helper.make_tensor_value_info(NEXT_IDS, TensorProto.INT64, [batch, 1]))


def add_to_file(path: Path) -> bool:
    import onnx

    model = onnx.load(str(path))
    if not add_graph_draw(model):
        return False
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return True


def check_draw(path: Path, rows: int = 4096, seed: int = 0) -> int:
    """Runs the graph's draw alone (the decoder's own nodes, cut from it) on random ranked
    candidates and parameters, and `inferd.generation.sampling`'s draw on the same; returns the
    rows whose tokens differ (0 is right)."""
    import onnx
    import onnxruntime as ort

    from inferd.generation.params import SamplingParams
    from inferd.generation.sampling import draw_inputs, sample_ranked

    model = onnx.load(str(path))
    width = ranked_width(model)
    part = onnx.utils.Extractor(model).extract_model(
        [TOP_LOGITS, TOP_IDS, DRAW_TEMPERATURE, DRAW_TOP_K, DRAW_TOP_P, DRAW_UNIFORM], [NEXT_IDS]
    )
    session = ort.InferenceSession(part.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    values = -np.sort(-rng.standard_normal((rows, width)).astype(np.float32) * 4, axis=1)
    values[: rows // 8, 1] = values[: rows // 8, 0]  # ties at the top
    ids = rng.integers(0, 50_000, (rows, width), dtype=np.int64)  # labels: repeats do no harm
    params = [
        SamplingParams(
            8,
            temperature=float(rng.choice([0.0, 0.3, 0.8, 1.0, 2.5])),
            top_k=int(rng.integers(1, width + 1)),
            top_p=float(rng.choice([1.0, 0.95, 0.5, 0.1])),
        )
        for _ in range(rows)
    ]
    uniforms = rng.random(rows)
    feeds = draw_inputs(params, uniforms, width)
    graph = session.run([NEXT_IDS], {TOP_LOGITS: values, TOP_IDS: ids, **feeds})[0][:, 0]
    replay = [_Replay(u) for u in uniforms]
    python = sample_ranked(values, ids, params, replay)  # type: ignore[arg-type]
    return int((graph != np.array(python)).sum())


class _Replay:
    """A generator stand-in that gives one chosen number (the row's uniform)."""

    def __init__(self, value: float) -> None:
        self._value = value

    def random(self) -> float:
        return self._value
