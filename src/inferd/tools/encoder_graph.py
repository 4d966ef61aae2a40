"""Building a BERT-style transformer encoder as an ONNX graph, from numpy weights.

Used offline only (never on the request path): by the benchmarks, with random weights of a chosen
size, and to turn BERT-family checkpoints (Hugging Face names, e.g. all-MiniLM-L6-v2's
safetensors) into a model without PyTorch. Needs the `onnx` package.

Inputs: `input_ids`, `attention_mask` (INT64, [batch, sequence]). Outputs: `last_hidden_state`
([batch, sequence, hidden]) and, when asked, `mean_pooled` ([batch, hidden], the mean over the
attention mask). Segment (token type) 0 is folded into the position embeddings: single-segment
inputs give exactly what the checkpoint gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from inferd.tools.encoder_shape import EncoderShape

Weights = Mapping[str, npt.NDArray[np.float32]]


class _Graph:
    """A small helper that names nodes and initializers as it goes."""

    def __init__(self) -> None:
        import onnx  # noqa: F401  (fail early with a clear ImportError when onnx is missing)

        self.nodes: list[object] = []
        self.inits: list[object] = []
        self._n = 0

    @property
    def count(self) -> int:
        """The nodes made so far: a suffix that keeps a name unique."""
        return self._n

    def const(self, name: str, array: npt.NDArray[np.generic]) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        from onnx import helper

        self._n += 1
        out = f"{op_type.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def named(self, op_type: str, inputs: list[str], output: str, **attrs: Any) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op_type, inputs, [output], **attrs))
        return output


def _strip_prefix(weights: Weights) -> dict[str, npt.NDArray[np.float32]]:
    """Accepts names with or without the `bert.` prefix."""
    return {k.removeprefix("bert."): np.asarray(v, dtype=np.float32) for k, v in weights.items()}


def build_encoder(
    weights: Weights,
    shape: EncoderShape,
    mean_pooled: bool = True,
    last_hidden_state: bool = True,
    opset: int = 17,
) -> object:
    """An `onnx.ModelProto` for the encoder; dynamic batch and sequence axes."""
    from onnx import TensorProto, helper

    g = _Graph()
    w = _strip_prefix(weights)
    h = shape.hidden
    seq_len = g.op("Shape", ["input_ids"], start=1, end=2)  # 1-D [sequence]
    pos = g.op(
        "Slice",
        [
            g.const("pos_emb", _positions(w)),
            g.const("zero_1d", np.array([0], np.int64)),
            seq_len,
            g.const("axis0_1d", np.array([0], np.int64)),
        ],
    )
    # additive attention mask [batch, 1, 1, sequence]: 0 where attended, a large negative elsewhere
    mask_f = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask4 = g.op(
        "Unsqueeze", [_additive(g, mask_f), g.const("axes_12", np.array([1, 2], np.int64))]
    )
    hidden = _layers(g, w, shape, _embed(g, w, shape, pos), mask4)

    outputs = []
    if last_hidden_state:
        g.named("Identity", [hidden], "last_hidden_state")
        outputs.append(
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", h]
            )
        )
    if mean_pooled:
        g.named("Identity", [_mean(g, hidden, mask_f)], "mean_pooled")
        outputs.append(
            helper.make_tensor_value_info("mean_pooled", TensorProto.FLOAT, ["batch", h])
        )
    if not outputs:
        raise ValueError("ask for at least one output")
    return _model(g, outputs, ("input_ids", "attention_mask"), opset)


def build_pair_scorer(weights: Weights, shape: EncoderShape, opset: int = 17) -> object:
    """An `onnx.ModelProto` that scores (query, text) pairs fed as a reranker's are (one
    sequence a pair: `[CLS] query [SEP] text [SEP]`, `token_type_ids` 1 for the text's tokens)
    with the encoder's own embeddings: the pair is split into the query alone and the text alone
    (given the pair's [CLS] in front), both are encoded as the encoder encodes one text, and the
    output `scores` ([batch, 1]) is the cosine of their mean-pooled states, the cosine of the two
    texts' embeddings."""
    from onnx import TensorProto, helper

    g = _Graph()
    w = _strip_prefix(weights)
    ids, types, mask = "input_ids", "token_type_ids", "attention_mask"
    both_ids, both_mask = _split_pairs(g, ids, types, mask)
    seq_len = g.op("Shape", [both_ids], start=1, end=2)
    pos = g.op(
        "Slice",
        [
            g.const("pos_emb", _positions(w)),
            g.const("zero_1d_p", np.array([0], np.int64)),
            seq_len,
            g.const("axis0_1d", np.array([0], np.int64)),
        ],
    )
    mask4 = g.op(
        "Unsqueeze", [_additive(g, both_mask), g.const("axes_12", np.array([1, 2], np.int64))]
    )
    hidden = _layers(g, w, shape, _embed(g, w, shape, pos, both_ids), mask4)
    vectors = _unit(g, _mean(g, hidden, both_mask))
    halves = g.op(
        "Reshape", [vectors, g.const("halves", np.array([2, -1, shape.hidden], np.int64))]
    )
    product = g.op("ReduceProd", [halves], axes=[0], keepdims=0)
    g.named(
        "ReduceSum", [product, g.const("axes_h", np.array([-1], np.int64))], "scores", keepdims=1
    )
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 1])]
    return _model(g, outputs, (ids, mask, types), opset)


def _split_pairs(g: _Graph, ids: str, types: str, mask: str) -> tuple[str, str]:
    """Each pair's query alone and text alone (given the pair's [CLS] in front), stacked
    [2 * batch, sequence + 1]: their token ids and float attention masks."""
    from onnx import TensorProto

    one_i = g.const("one_i", np.array(1, np.int64))
    zero_i = g.const("zero_i", np.array(0, np.int64))
    axis1 = g.const("axis1_i", np.array(1, np.int64))

    def widened(x: str) -> str:  # one more column of 0 at the end: [batch, sequence + 1]
        return g.op("Pad", [x, g.const(f"pads_{g.count}", np.array([0, 0, 0, 1], np.int64))])

    ids_p, types_p, mask_p = widened(ids), widened(types), widened(mask)
    query_mask = g.op("Mul", [mask_p, g.op("Sub", [one_i, types_p])])
    text_mask = g.op("Mul", [mask_p, types_p])
    query_len = g.op("ReduceSum", [query_mask, g.const("axes_seq_i", np.array([1], np.int64))])
    # the text alone: its [CLS] (the pair's first token), then its tokens from where they begin
    column = g.op(
        "Sub", [g.op("CumSum", [g.op("Add", [g.op("Mul", [ids_p, zero_i]), one_i]), axis1]), one_i]
    )
    last = g.op("Sub", [g.op("Shape", [ids_p], start=1, end=2), one_i])
    source = g.op(
        "Min", [g.op("Max", [g.op("Sub", [g.op("Add", [column, query_len]), one_i]), zero_i]), last]
    )
    first = g.op("Equal", [column, zero_i])
    cls = g.op(
        "Slice",
        [
            ids,
            g.const("zero_1d", np.array([0], np.int64)),
            g.const("one_1d", np.array([1], np.int64)),
            g.const("axis1_1d", np.array([1], np.int64)),
        ],
    )
    text_ids = g.op("Where", [first, cls, g.op("GatherElements", [ids_p, source], axis=1)])
    text_keep = g.op("Where", [first, one_i, g.op("GatherElements", [text_mask, source], axis=1)])
    both_ids = g.op("Concat", [ids_p, text_ids], axis=0)
    both_mask = g.op(
        "Cast", [g.op("Concat", [query_mask, text_keep], axis=0)], to=TensorProto.FLOAT
    )

    return both_ids, both_mask


def _positions(w: dict[str, npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    """The position embeddings with segment 0's folded in."""
    positions = (
        w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    )
    return np.asarray(positions, dtype=np.float32)


def _embed(
    g: _Graph,
    w: dict[str, npt.NDArray[np.float32]],
    shape: EncoderShape,
    pos: str,
    ids: str = "input_ids",
) -> str:
    """The word embeddings of `ids` plus `pos` (positions and segment 0), normalized."""
    words = g.op("Gather", [g.const("word_emb", w["embeddings.word_embeddings.weight"]), ids])
    return _layer_norm(g, w, shape, g.op("Add", [words, pos]), "embeddings.LayerNorm")


def _additive(g: _Graph, allowed: str) -> str:
    """0 where `allowed` is 1, a large negative where it is 0."""
    inverted = g.op("Sub", [g.const("one_mask", np.array(1.0, np.float32)), allowed])
    return g.op("Mul", [inverted, g.const("neg_big", np.array(-1e4, np.float32))])


def _layer_norm(
    g: _Graph, w: dict[str, npt.NDArray[np.float32]], shape: EncoderShape, x: str, prefix: str
) -> str:
    scale = g.const(prefix + ".weight", w[prefix + ".weight"])
    bias = g.const(prefix + ".bias", w[prefix + ".bias"])
    return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=shape.layer_norm_eps)


def _layers(
    g: _Graph, w: dict[str, npt.NDArray[np.float32]], shape: EncoderShape, hidden: str, mask4: str
) -> str:
    """The transformer layers over `hidden`, attention masked by the additive `mask4`."""
    h, heads, dh = shape.hidden, shape.heads, shape.head_dim

    def linear(x: str, prefix: str) -> str:
        weight = g.const(prefix + ".weight", w[prefix + ".weight"].T)  # torch stores [out, in]
        bias = g.const(prefix + ".bias", w[prefix + ".bias"])
        return g.op("Add", [g.op("MatMul", [x, weight]), bias])

    split_heads = g.const("split_heads", np.array([0, 0, heads, dh], np.int64))
    merge_heads = g.const("merge_heads", np.array([0, 0, h], np.int64))
    scale = g.const("attn_scale", np.array(1.0 / np.sqrt(dh), np.float32))
    sqrt2 = g.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    half = g.const("half", np.array(0.5, np.float32))
    one = g.const("one_gelu", np.array(1.0, np.float32))

    def heads_view(x: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [x, split_heads])], perm=perm)

    for n in range(shape.layers):
        p = f"encoder.layer.{n}."
        q = heads_view(linear(hidden, p + "attention.self.query"), [0, 2, 1, 3])
        k = heads_view(linear(hidden, p + "attention.self.key"), [0, 2, 3, 1])
        v = heads_view(linear(hidden, p + "attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), mask4])
        probs = g.op("Softmax", [scores], axis=-1)
        context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, merge_heads])
        attn = linear(context, p + "attention.output.dense")
        hidden = _layer_norm(
            g, w, shape, g.op("Add", [attn, hidden]), p + "attention.output.LayerNorm"
        )
        inter = linear(hidden, p + "intermediate.dense")
        gelu = g.op(
            "Mul",
            [
                g.op("Mul", [inter, half]),
                g.op("Add", [g.op("Erf", [g.op("Div", [inter, sqrt2])]), one]),
            ],
        )
        out = linear(gelu, p + "output.dense")
        hidden = _layer_norm(g, w, shape, g.op("Add", [out, hidden]), p + "output.LayerNorm")
    return hidden


def _mean(g: _Graph, hidden: str, weights_f: str) -> str:
    """The mean of `hidden` ([batch, sequence, hidden]) over the tokens `weights_f` marks."""
    mask3 = g.op(
        "Unsqueeze", [weights_f, g.const(f"axes_last_{g.count}", np.array([-1], np.int64))]
    )
    axes_seq = g.const(f"axes_seq_{g.count}", np.array([1], np.int64))
    summed = g.op("ReduceSum", [g.op("Mul", [hidden, mask3]), axes_seq], keepdims=0)
    counts = g.op("ReduceSum", [mask3, axes_seq], keepdims=0)
    counts = g.op("Max", [counts, g.const(f"min_count_{g.count}", np.array(1e-9, np.float32))])
    return g.op("Div", [summed, counts])


def _unit(g: _Graph, vector: str) -> str:
    """`vector` ([batch, hidden]) over its L2 norm."""
    norm = g.op("ReduceL2", [vector], axes=[-1], keepdims=1)
    floor = g.const(f"min_norm_{g.count}", np.array(1e-12, np.float32))
    return g.op("Div", [vector, g.op("Max", [norm, floor])])


def _model(
    g: _Graph, outputs: Sequence[object], input_names: tuple[str, ...], opset: int
) -> object:
    from onnx import TensorProto, checker, helper

    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in input_names
    ]
    graph = helper.make_graph(g.nodes, "encoder", inputs, outputs, g.inits)  # type: ignore[arg-type]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model.producer_name = "inferd"
    checker.check_model(model)
    return model
