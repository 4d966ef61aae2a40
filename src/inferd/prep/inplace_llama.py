"""Llama decoders with an in-place KV cache, written as an ONNX graph from the model's weights.

The same interface and cache as GPT-2's in-place graph (inferd.prep.inplace_decoder): a fixed
buffer per layer and kind, bound as both past and present, each row's length in `seqlens_k`,
the logits of each row's last real token. What Llama adds is carried by ONNX Runtime's
`GroupQueryAttention` itself: fewer key/value heads than query heads (the cache holds the
key/value heads only) and the rotary embedding, which the operator applies to the step's
queries and keys at each row's own positions (0.. for a right-padded prompt, a row's length
for a decode step) from cosine and sine tables written into the graph. The tables come from
the model's own rotary module (`inv_freq`, `attention_scaling`), so the frequency-scaled
variants whose frequencies do not depend on the sequence's length (Llama 3's) are the model's
too; the ones that do ("dynamic", "longrope") are refused.

Each layer: RMS norm, one matrix product for queries, keys and values together (their biases
when the model has them), attention, the output projection, the residual; RMS norm, one
product for the gate and up projections together, SiLU(gate) x up, the down projection, the
residual. Then the final norm and the output projection, on each row's last real token.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from inferd.generation.decoder import LOGITS, SEQLENS, TOTAL
from inferd.prep.inplace_decoder import GraphParts, InplaceDecoderError
from inferd.runtime.kv_names import PAST, PRESENT, cache_names

LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")
"""Rotary variants whose frequencies change with the sequence's length: not a fixed table."""


def check_llama_config(raw: dict[str, Any], rope_type: str) -> None:
    if raw.get("hidden_act", "silu") != "silu":
        raise InplaceDecoderError(
            f"activation {raw['hidden_act']!r} is not supported in place; supported: silu"
        )
    if rope_type in LENGTH_DEPENDENT_ROPE:
        raise InplaceDecoderError(
            f"rotary embedding {rope_type!r} depends on the sequence's length: "
            "not supported in place"
        )


def rotary_tables(
    inv_freq: np.ndarray, positions: int, scaling: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Cosine and sine of each position x frequency: `[positions, head_dim / 2]` each."""
    angles = np.outer(np.arange(positions, dtype=np.float64), inv_freq.astype(np.float64))
    return (np.cos(angles) * scaling).astype(np.float32), (np.sin(angles) * scaling).astype(
        np.float32
    )


def _check_rotary(head_dim: int, inv_freq: np.ndarray) -> None:
    if head_dim % 16:
        raise InplaceDecoderError(
            f"head_dim {head_dim}: ONNX Runtime's rotary attention takes multiples of 16"
        )
    if inv_freq.shape != (head_dim // 2,):
        raise InplaceDecoderError(
            f"rotary frequencies of shape {inv_freq.shape}: a partial rotary embedding is not "
            "supported in place"
        )


def _linear(
    g: GraphParts, weights: dict[str, np.ndarray], x: str, prefixes: list[str], out: str
) -> str:
    """One product for the projections `prefixes` side by side (torch's [out, in])."""
    matrix = np.concatenate([weights[f"{p}.weight"] for p in prefixes], axis=0).T
    y = g.node("MatMul", [x, g.weight(f"{out}_w", matrix)], f"{out}_mm")
    if all(f"{p}.bias" in weights for p in prefixes):
        bias = np.concatenate([weights[f"{p}.bias"] for p in prefixes])
        y = g.node("Add", [y, g.weight(f"{out}_b", bias)], out)
    return y


def _rms_norm(g: GraphParts, x: str, name: str, out: str, consts: tuple[str, str]) -> str:
    """RMS norm in plain operators, the form ONNX Runtime fuses into its own kernel (with the
    residual's Add before it); `consts`: the exponent 2 and the epsilon, as initializers."""
    two, epsilon = consts
    square = g.node("Pow", [x, two], f"{out}_sq")
    mean = g.node("ReduceMean", [square], f"{out}_mean", axes=[-1], keepdims=1)
    root = g.node("Sqrt", [g.node("Add", [mean, epsilon], f"{out}_eps")], f"{out}_rms")
    return g.node("Mul", [g.node("Div", [x, root], f"{out}_div"), g.weight(name)], out)


class _Attention(NamedTuple):
    heads: int
    kv_heads: int
    rotary: tuple[str, str]
    """The cos and sin tables' initializers."""
    past: list[str]
    present: list[str]


def _decoder_layer(
    g: GraphParts,
    weights: dict[str, np.ndarray],
    x: str,
    i: int,
    attention: _Attention,
    consts: tuple[str, str],
    gate_up: str,
) -> str:
    """Layer `i`: attention (ONNX Runtime's GroupQueryAttention, the cache in place) and the
    SwiGLU MLP, each after its RMS norm and with its residual; returns its output."""
    p = f"model.layers.{i}"
    attn = f"{p}.self_attn"
    h = _rms_norm(g, x, f"{p}.input_layernorm.weight", f"l{i}_norm1", consts)
    qkv = _linear(
        g, weights, h, [f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"], f"l{i}_qkv"
    )
    g.outputs(
        "GroupQueryAttention",
        [qkv, "", "", *attention.past[2 * i : 2 * i + 2], SEQLENS, TOTAL, *attention.rotary],
        [f"l{i}_attn", *attention.present[2 * i : 2 * i + 2]],
        "com.microsoft",
        num_heads=attention.heads,
        kv_num_heads=attention.kv_heads,
        do_rotary=1,
        rotary_interleaved=0,
    )
    a = _linear(g, weights, f"l{i}_attn", [f"{attn}.o_proj"], f"l{i}_o")
    x = g.node("Add", [x, a], f"l{i}_res1")
    h = _rms_norm(g, x, f"{p}.post_attention_layernorm.weight", f"l{i}_norm2", consts)
    both = _linear(g, weights, h, [f"{p}.mlp.gate_proj", f"{p}.mlp.up_proj"], f"l{i}_gate_up")
    gate, up = g.outputs("Split", [both, gate_up], [f"l{i}_gate", f"l{i}_up"], axis=-1)
    act = g.node("Mul", [gate, g.node("Sigmoid", [gate], f"l{i}_sig")], f"l{i}_silu")
    f = g.node("Mul", [act, up], f"l{i}_swiglu")
    f = _linear(g, weights, f, [f"{p}.mlp.down_proj"], f"l{i}_down")
    x = g.node("Add", [x, f], f"l{i}_res2")
    return x


def build_inplace_llama(
    weights: dict[str, np.ndarray],
    raw: dict[str, Any],
    inv_freq: np.ndarray,
    attention_scaling: float = 1.0,
    rope_type: str = "default",
    opset: int = 17,
    last_only: bool = True,
) -> Any:
    """The ONNX model (onnx.ModelProto) for a Llama state dict (`model.*` and `lm_head.*`
    names, float32 arrays), its config.json and its rotary frequencies (`inv_freq`,
    `[head_dim / 2]`)."""
    check_llama_config(raw, rope_type)
    layers = int(raw["num_hidden_layers"])
    heads = int(raw["num_attention_heads"])
    kv_heads = int(raw.get("num_key_value_heads") or heads)
    hidden, vocab = int(raw["hidden_size"]), int(raw["vocab_size"])
    head_dim = int(raw.get("head_dim") or hidden // heads)
    context = int(raw.get("max_position_embeddings", 2048))
    eps = float(raw.get("rms_norm_eps", 1e-6))
    _check_rotary(head_dim, inv_freq)
    g = GraphParts(weights)

    two = g.weight("rms_two", np.array(2.0, np.float32))
    epsilon = g.weight("rms_eps", np.array(eps, np.float32))

    cos, sin = rotary_tables(inv_freq, context, attention_scaling)
    cos_name, sin_name = g.weight("rotary_cos", cos), g.weight("rotary_sin", sin)
    x = g.node("Gather", [g.weight("model.embed_tokens.weight"), "input_ids"], "tok_emb")
    intermediate = int(weights["model.layers.0.mlp.up_proj.weight"].shape[0])
    gate_up = g.ints("gate_up_split", [intermediate, intermediate])
    past, present = cache_names(layers, PAST), cache_names(layers, PRESENT)
    attention = _Attention(heads, kv_heads, (cos_name, sin_name), past, present)
    for i in range(layers):
        x = _decoder_layer(g, weights, x, i, attention, (two, epsilon), gate_up)
    if last_only:
        x = g.last_tokens(x, hidden)
    x = _rms_norm(g, x, "model.norm.weight", "final_norm", (two, epsilon))
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    g.node("MatMul", [x, g.weight("lm_head_t", np.ascontiguousarray(head.T))], LOGITS)
    return g.model("inferd-llama-inplace", (layers, kv_heads, head_dim), vocab, last_only, opset)
