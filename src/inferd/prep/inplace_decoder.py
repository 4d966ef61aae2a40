"""GPT-2 decoders with an in-place KV cache, written as an ONNX graph from the model's weights.

The plain export (inferd.prep.decoder_export) concatenates each step's keys and values to the past,
so every decode step copies the whole cache and attends over the batch's longest row. This
graph uses ONNX Runtime's `GroupQueryAttention` instead: the cache is a fixed buffer
`[batch, heads, capacity, head_dim]` per layer and kind that the runtime binds as both the past
input and the present output, so a step writes only the new token's keys and values, at each
row's own position, and attends over each row's own length (`seqlens_k`), not the longest.

Inputs: `input_ids [batch, sequence]`, `position_ids [batch, sequence]`, `seqlens_k [batch]`
(int32: each row's length after this step, minus one), `total_sequence_length` (int32 scalar:
the longest of those lengths), `past_key_values.{i}.key|value`; outputs: `logits`,
`present.{i}.key|value` (the same buffers). A prefill passes right-padded prompts.

`logits` is `[batch, 1, vocab]`: each row's last real token only (its position in the step:
`seqlens_k - position_ids[:, 0]`), the one a next token is drawn from. The final norm and the
output projection run on that token alone, so a prefill of an L-token prompt neither computes
nor holds L x vocab logits (a 2,048-token prompt over GPT-2's 50,257-token vocabulary: 412 MB
of float32 and about 30% of the prompt's multiply-adds at GPT-2 small's size); a decode step,
one token a row, is unchanged. `last_only=False` keeps every position's logits.

`GraphParts` writes what the in-place graphs share (their inputs and outputs, the last tokens'
gather); inferd.prep.inplace_llama writes Llama's with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inferd.generation.decoder import LOGITS, POSITIONS, SEQLENS, TOTAL
from inferd.prep.source_record import SourceError
from inferd.runtime.kv_names import PAST, PRESENT, cache_names
from inferd.runtime.protocol import Array

ACTIVATIONS = {"gelu_new": "FastGelu", "gelu_pytorch_tanh": "FastGelu", "gelu": "Gelu"}


class InplaceDecoderError(SourceError):
    """The model has a setting this graph does not reproduce (named in the message)."""


def check_config(raw: dict[str, Any]) -> None:
    activation = raw.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise InplaceDecoderError(
            f"activation {activation!r} is not supported in place; "
            f"supported: {', '.join(ACTIVATIONS)}"
        )
    for key, plain in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("reorder_and_upcast_attn", False),
    ):
        if raw.get(key, plain) != plain:
            raise InplaceDecoderError(f"{key}={raw[key]!r} is not supported in place")
    if raw.get("tie_word_embeddings", True) is not True:
        raise InplaceDecoderError("untied output embeddings are not supported in place")


class GraphParts:
    """The initializers and nodes of an in-place decoder graph as it is written, from a state
    dict (`weights`: float32 arrays by name)."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self.weights = weights
        self.inits: list[Any] = []
        self.nodes: list[Any] = []

    def weight(self, name: str, array: np.ndarray | None = None) -> str:
        from onnx import numpy_helper

        value = self.weights[name] if array is None else array
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value, np.float32), name))
        return name

    def ints(self, name: str, values: list[int]) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def node(self, op: str, inputs: list[str], out: str, domain: str = "", **attrs: Any) -> str:
        return self.outputs(op, inputs, [out], domain, **attrs)[0]

    def outputs(
        self, op: str, inputs: list[str], outs: list[str], domain: str = "", **attrs: Any
    ) -> list[str]:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, outs, name=outs[0], domain=domain, **attrs))
        return outs

    def last_tokens(self, x: str, hidden: int) -> str:
        """`x [batch, sequence, hidden]` at each row's last real token: `[batch, 1, hidden]`.
        That token is at `seqlens_k - position_ids[:, 0]` in the step: a right-padded prompt's
        length - 1 (its positions start at 0), 0 for a decode step's one token."""
        from onnx import TensorProto

        one, axis1 = self.ints("last_one", [1]), self.ints("last_axis1", [1])
        zero = self.ints("last_zero", [0])
        first = self.node("Slice", [POSITIONS, zero, one, axis1], "last_first_position")
        ends = self.node("Cast", [SEQLENS], "last_seqlens", to=TensorProto.INT64)
        ends = self.node("Unsqueeze", [ends, axis1], "last_seqlens_2d")
        at = self.node("Sub", [ends, first], "last_at")  # [batch, 1]
        at = self.node("Unsqueeze", [at, self.ints("last_axis2", [2])], "last_at_3d")
        at = self.node("Expand", [at, self.ints("last_width", [1, 1, hidden])], "last_index")
        return self.node("GatherElements", [x, at], "last_tokens", axis=1)

    def model(
        self, name: str, cache: tuple[int, int, int], vocab: int, last_only: bool, opset: int
    ) -> Any:
        """The model of these parts with the in-place decoder's inputs and outputs; `cache`:
        (layers, KV heads, head_dim); the graph's last node writes `logits`."""
        from onnx import TensorProto, helper

        layers, kv_heads, head_dim = cache
        f32, i64, i32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
        cache_shape: list[str | int | None] = ["batch", kv_heads, "capacity", head_dim]
        past, present = cache_names(layers, PAST), cache_names(layers, PRESENT)
        graph = helper.make_graph(
            self.nodes,
            name,
            [
                helper.make_tensor_value_info("input_ids", i64, ["batch", "sequence"]),
                helper.make_tensor_value_info(POSITIONS, i64, ["batch", "sequence"]),
                helper.make_tensor_value_info(SEQLENS, i32, ["batch"]),
                helper.make_tensor_value_info(TOTAL, i32, []),
                *(helper.make_tensor_value_info(n, f32, cache_shape) for n in past),
            ],
            [
                helper.make_tensor_value_info(
                    LOGITS, f32, ["batch", 1 if last_only else "sequence", vocab]
                ),
                *(helper.make_tensor_value_info(n, f32, cache_shape) for n in present),
            ],
            self.inits,
        )
        model = helper.make_model(
            graph,
            opset_imports=[
                helper.make_opsetid("", opset),
                helper.make_opsetid("com.microsoft", 1),
            ],
        )
        model.ir_version = 8
        return model


def build_inplace_decoder(
    weights: dict[str, np.ndarray], raw: dict[str, Any], opset: int = 17, last_only: bool = True
) -> Any:
    """The ONNX model (onnx.ModelProto) for a GPT-2 state dict (`transformer.*` names, float32
    arrays) and its config.json; `last_only`: logits of each row's last real token only."""
    check_config(raw)
    layers, heads = int(raw["n_layer"]), int(raw["n_head"])
    hidden, vocab = int(raw["n_embd"]), int(raw["vocab_size"])
    eps = float(raw.get("layer_norm_epsilon", 1e-5))
    activation = ACTIVATIONS[raw.get("activation_function", "gelu_new")]
    g = GraphParts(weights)

    def linear(x: str, prefix: str, out: str) -> str:
        y = g.node("MatMul", [x, g.weight(f"{prefix}.weight")], f"{out}_mm")
        return g.node("Add", [y, g.weight(f"{prefix}.bias")], out)

    def norm(x: str, prefix: str, out: str) -> str:
        scale, bias = g.weight(f"{prefix}.weight"), g.weight(f"{prefix}.bias")
        return g.node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=eps)

    tokens = g.node("Gather", [g.weight("transformer.wte.weight"), "input_ids"], "tok_emb")
    places = g.node("Gather", [g.weight("transformer.wpe.weight"), POSITIONS], "pos_emb")
    x = g.node("Add", [tokens, places], "emb")
    split = g.ints("qkv_split", [hidden] * 3)
    past, present = cache_names(layers, PAST), cache_names(layers, PRESENT)
    for i in range(layers):
        p = f"transformer.h.{i}"
        h = norm(x, f"{p}.ln_1", f"h{i}_ln1")
        qkv = linear(h, f"{p}.attn.c_attn", f"h{i}_qkv")
        q, k, v = g.outputs("Split", [qkv, split], [f"h{i}_q", f"h{i}_k", f"h{i}_v"], axis=2)
        g.outputs(
            "GroupQueryAttention",
            [q, k, v, past[2 * i], past[2 * i + 1], SEQLENS, TOTAL],
            [f"h{i}_attn", present[2 * i], present[2 * i + 1]],
            "com.microsoft",
            num_heads=heads,
            kv_num_heads=heads,
        )
        a = linear(f"h{i}_attn", f"{p}.attn.c_proj", f"h{i}_proj")
        x = g.node("Add", [x, a], f"h{i}_res1")
        h = norm(x, f"{p}.ln_2", f"h{i}_ln2")
        f = linear(h, f"{p}.mlp.c_fc", f"h{i}_fc")
        f = g.node(activation, [f], f"h{i}_act", domain="com.microsoft")
        f = linear(f, f"{p}.mlp.c_proj", f"h{i}_mlp")
        x = g.node("Add", [x, f], f"h{i}_res2")
    if last_only:
        x = g.last_tokens(x, hidden)
    x = norm(x, "transformer.ln_f", "final_ln")
    head = g.weight("lm_head_t", np.ascontiguousarray(weights["transformer.wte.weight"].T))
    g.node("MatMul", [x, head], LOGITS)
    return g.model("inferd-gpt2-inplace", (layers, heads, hidden // heads), vocab, last_only, opset)


def compare_with_concat(
    concat_path: Path, inplace_path: Path, vocab: int, context: int, seed: int = 0
) -> float:
    """The largest |difference| of logits between the two layouts of one model, both driven
    the same way (`decoder_logits`)."""
    concat = decoder_logits(concat_path, vocab, context, seed)
    inplace = decoder_logits(inplace_path, vocab, context, seed)
    worst = 0.0
    for seq, expected in concat.items():
        for a, b in zip(expected, inplace[seq], strict=True):
            diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
            worst = max(worst, float(np.abs(diff).max()))
    return worst


def decoder_logits(path: Path, vocab: int, context: int, seed: int = 0) -> dict[int, list[Array]]:
    """Each sequence's logits at each step of a decoder driven by the KV store that serves it:
    four prompts of different lengths prefilled together, decode steps, then two sequences
    leaving (the store compacts its rows) and more steps; the same prompts and fed tokens for
    a `seed`, whatever the decoder's layout or precision."""
    from inferd.config.model import GenerationConfig, RuntimeOptions
    from inferd.generation.decoder import DecoderShape
    from inferd.generation.kv_layout import kv_store
    from inferd.runtime.onnx_session import OnnxSession

    rng = np.random.default_rng(seed)
    lengths = [min(n, context // 2) for n in (5, 11, 3, 8)]
    prompts = [[int(t) for t in rng.integers(1, vocab, n)] for n in lengths]
    config = GenerationConfig(
        context_length=context, max_running=len(prompts), max_kv_tokens=len(prompts) * context
    )
    session = OnnxSession(path, RuntimeOptions())
    try:
        shape = DecoderShape.of(session.inputs, session.outputs)
        store = kv_store(shape, config)
        rows = list(range(len(prompts)))  # the sequence in each row
        step = store.prefill(prompts, rows, 0)
        logits = store.after_prefill(step, session.run(step.feeds, shape.output_names, step.into))
        seen: dict[int, list[Array]] = {r: [logits[r]] for r in rows}
        tokens = dict(enumerate(_reference_tokens(prompts, vocab, seed)))
        for n in range(6):
            if n == 3:  # sequences 0 and 2 leave
                order = store.compact([i for i, r in enumerate(rows) if r in (1, 3)])
                if order is None:
                    raise RuntimeError("the KV store kept its rows when half of them left")
                rows = [rows[i] for i in order]
            fed = np.array([tokens[r][n] for r in rows], dtype=np.int64)
            at = np.array([lengths[r] + n for r in rows], dtype=np.int64)
            step = store.decode(fed, at)
            out = session.run(step.feeds, shape.output_names, step.into)
            store.after_decode(step, out)
            for i, r in enumerate(rows):
                seen[r].append(out[LOGITS][i, -1, :])
    finally:
        session.close()
    return seen


def _reference_tokens(prompts: list[list[int]], vocab: int, seed: int) -> list[list[int]]:
    """The tokens fed at each decode step, per sequence: the same for both layouts."""
    rng = np.random.default_rng(seed + 1)
    return [[int(t) for t in rng.integers(1, vocab, 6)] for _ in prompts]
