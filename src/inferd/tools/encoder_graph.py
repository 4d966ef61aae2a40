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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Weights = Mapping[str, npt.NDArray[np.float32]]


@dataclass(frozen=True)
class EncoderShape:
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    intermediate: int = 1536
    vocab: int = 30522
    max_positions: int = 512
    layer_norm_eps: float = 1e-12

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def random_weights(shape: EncoderShape, seed: int = 0) -> dict[str, npt.NDArray[np.float32]]:
    """Weights in Hugging Face BERT names, drawn like BERT's initializer (std 0.02)."""
    rng = np.random.default_rng(seed)

    def normal(*dims: int) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    h, i = shape.hidden, shape.intermediate
    w: dict[str, npt.NDArray[np.float32]] = {
        "embeddings.word_embeddings.weight": normal(shape.vocab, h),
        "embeddings.position_embeddings.weight": normal(shape.max_positions, h),
        "embeddings.token_type_embeddings.weight": normal(2, h),
        "embeddings.LayerNorm.weight": np.ones(h, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(h, np.float32),
    }

    for n in range(shape.layers):
        p = f"encoder.layer.{n}."
        for name in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ):
            w[p + name + ".weight"] = normal(h, h)
            w[p + name + ".bias"] = np.zeros(h, np.float32)
        w[p + "intermediate.dense.weight"] = normal(i, h)
        w[p + "intermediate.dense.bias"] = np.zeros(i, np.float32)
        w[p + "output.dense.weight"] = normal(h, i)
        w[p + "output.dense.bias"] = np.zeros(h, np.float32)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + ln + ".weight"] = np.ones(h, np.float32)
            w[p + ln + ".bias"] = np.zeros(h, np.float32)
    return w


class _Graph:
    """A small helper that names nodes and initializers as it goes."""

    def __init__(self) -> None:
        import onnx  # noqa: F401  (fail early with a clear ImportError when onnx is missing)

        self.nodes: list[object] = []
        self.inits: list[object] = []
        self._n = 0

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
    from onnx import TensorProto, checker, helper

    w = _strip_prefix(weights)
    g = _Graph()
    h, heads, dh = shape.hidden, shape.heads, shape.head_dim
    eps = shape.layer_norm_eps

    def linear(x: str, prefix: str) -> str:
        weight = g.const(prefix + ".weight", w[prefix + ".weight"].T)  # torch stores [out, in]
        bias = g.const(prefix + ".bias", w[prefix + ".bias"])
        return g.op("Add", [g.op("MatMul", [x, weight]), bias])

    def layer_norm(x: str, prefix: str) -> str:
        scale = g.const(prefix + ".weight", w[prefix + ".weight"])
        bias = g.const(prefix + ".bias", w[prefix + ".bias"])
        return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)

    # embeddings: word + position (+ segment 0, folded into the positions)
    words = g.op(
        "Gather", [g.const("word_emb", w["embeddings.word_embeddings.weight"]), "input_ids"]
    )
    positions = (
        w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    )
    seq_len = g.op("Shape", ["input_ids"], start=1, end=2)  # 1-D [sequence]
    pos = g.op(
        "Slice",
        [
            g.const("pos_emb", positions.astype(np.float32)),
            g.const("zero_1d", np.array([0], np.int64)),
            seq_len,
            g.const("axis0_1d", np.array([0], np.int64)),
        ],
    )
    hidden = layer_norm(g.op("Add", [words, pos]), "embeddings.LayerNorm")

    # additive attention mask [batch, 1, 1, sequence]: 0 where attended, a large negative elsewhere
    mask_f = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.const("one_f", np.array(1.0, np.float32)), mask_f])
    additive = g.op("Mul", [inverted, g.const("neg_big", np.array(-1e4, np.float32))])
    mask4 = g.op("Unsqueeze", [additive, g.const("axes_12", np.array([1, 2], np.int64))])

    split_heads = g.const("split_heads", np.array([0, 0, heads, dh], np.int64))
    merge_heads = g.const("merge_heads", np.array([0, 0, h], np.int64))
    scale = g.const("attn_scale", np.array(1.0 / np.sqrt(dh), np.float32))
    sqrt2 = g.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    half = g.const("half", np.array(0.5, np.float32))
    one = "one_f"

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
        hidden = layer_norm(g.op("Add", [attn, hidden]), p + "attention.output.LayerNorm")
        inter = linear(hidden, p + "intermediate.dense")
        gelu = g.op(
            "Mul",
            [
                g.op("Mul", [inter, half]),
                g.op("Add", [g.op("Erf", [g.op("Div", [inter, sqrt2])]), one]),
            ],
        )
        out = linear(gelu, p + "output.dense")
        hidden = layer_norm(g.op("Add", [out, hidden]), p + "output.LayerNorm")

    outputs = []
    if last_hidden_state:
        g.named("Identity", [hidden], "last_hidden_state")
        outputs.append(
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", h]
            )
        )
    if mean_pooled:
        mask3 = g.op("Unsqueeze", [mask_f, g.const("axes_last", np.array([-1], np.int64))])
        axes_seq = g.const("axes_seq", np.array([1], np.int64))
        summed = g.op("ReduceSum", [g.op("Mul", [hidden, mask3]), axes_seq], keepdims=0)
        counts = g.op("ReduceSum", [mask3, axes_seq], keepdims=0)
        counts = g.op("Max", [counts, g.const("min_count", np.array(1e-9, np.float32))])
        g.named("Div", [summed, counts], "mean_pooled")
        outputs.append(
            helper.make_tensor_value_info("mean_pooled", TensorProto.FLOAT, ["batch", h])
        )
    if not outputs:
        raise ValueError("ask for at least one output")

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ]
    graph = helper.make_graph(g.nodes, "encoder", inputs, outputs, g.inits)  # type: ignore[arg-type]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model.producer_name = "inferd"
    checker.check_model(model)
    return model
