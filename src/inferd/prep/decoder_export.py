"""Decoders (GPT-2, and Llama and the models that follow its config) exported with their KV
cache as plain tensors.

Inputs: `input_ids [batch, sequence]`, `attention_mask [batch, past + sequence]`,
`position_ids [batch, sequence]`, and per layer `past_key_values.{i}.key|value
[batch, heads, past, head_dim]`; outputs: `logits [batch, 1, vocab]` and
`present.{i}.key|value [batch, heads, past + sequence, head_dim]`. A prefill passes a past of
length 0. This is the layout inferd's generation runtime drives (and ONNX Runtime's own GPT-2
tools use), so per-sequence masks and positions keep sequences independent inside a batch.

The logits are the last position's only (transformers' `logits_to_keep=1`): prompts are
left-padded, so that is every row's last real token, the one a next token is drawn from, and
a prefill of an L-token prompt neither computes nor holds L x vocab logits (with a Llama 3
vocabulary of 128,256 tokens an 8,192-token prompt's would be 4.2 GB of float32). A model
whose `forward` takes no such argument keeps every position's (`logits [batch, sequence,
vocab]`); inferd drives both.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.prep.feeds import FeedPlan
from inferd.prep.source_record import Source, SourceError, tokenizer_dir
from inferd.prep.spec import BATCH_AXIS
from inferd.runtime.kv_names import PAST, PRESENT, cache_names

LAST_ONLY_ARGS = ("logits_to_keep", "num_logits_to_keep")
"""The argument that keeps the last positions' logits only: transformers' name since 4.50,
and the one before it."""


INPLACE_ARCHITECTURES = ("gpt2", "llama")
"""The architectures (config.json's `model_type`) with an in-place KV cache graph:
inferd.prep.inplace_decoder (GPT-2) and inferd.prep.inplace_llama."""


def last_only_arg(model: Any) -> str | None:
    """The argument of the model's `forward` that gives the last position's logits alone."""
    import inspect

    accepted = inspect.signature(model.forward).parameters
    return next((name for name in LAST_ONLY_ARGS if name in accepted), None)


def wrap_decoder(model: Any, layers: int) -> Any:
    import inspect

    import torch
    from transformers.cache_utils import DynamicCache

    accepted = inspect.signature(model.forward).parameters
    # transformers 5 names the argument `cache`; older releases `past_key_values`
    cache_arg = "cache" if "cache" in accepted else "past_key_values"
    keep = last_only_arg(model)
    last_only = {} if keep is None else {keep: 1}

    class DecoderExport(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            position_ids: torch.Tensor,
            *past: torch.Tensor,
        ) -> tuple[torch.Tensor, ...]:
            cache = DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            result = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                return_dict=True,
                **{cache_arg: cache},
                **last_only,
            )
            outs = [result.logits]
            present = result.get(cache_arg)
            for layer in present.layers[:layers]:
                outs += [layer.keys, layer.values]
            return tuple(outs)

    return DecoderExport()


@dataclass(frozen=True)
class DecoderConfig:
    """What the export needs of a decoder's config.json, under GPT-2's names or the names of
    Llama and the models that follow it (`num_hidden_layers`, grouped key/value heads)."""

    name: str
    layers: int
    heads: int
    kv_heads: int
    """Heads of the KV cache (fewer than `heads` with grouped-query attention)."""
    head_dim: int
    hidden: int
    vocab: int
    context: int

    @staticmethod
    def of(raw: dict[str, Any]) -> DecoderConfig:
        vocab = int(raw["vocab_size"])
        if raw.get("model_type") == "gpt2":
            heads, hidden = int(raw["n_head"]), int(raw["n_embd"])
            return DecoderConfig(
                "GPT-2",
                int(raw["n_layer"]),
                heads,
                heads,
                hidden // heads,
                hidden,
                vocab,
                int(raw.get("n_positions", 1024)),
            )
        heads, hidden = int(raw["num_attention_heads"]), int(raw["hidden_size"])
        return DecoderConfig(
            "Llama",
            int(raw["num_hidden_layers"]),
            heads,
            int(raw.get("num_key_value_heads") or heads),
            int(raw.get("head_dim") or hidden // heads),
            hidden,
            vocab,
            int(raw.get("max_position_embeddings", 2048)),
        )


def decoder_source(folder: Path, raw: dict[str, Any]) -> Source:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), local_files_only=True, attn_implementation="eager"
        )
    except (OSError, ValueError) as exc:
        raise SourceError(f"{folder}: cannot load the model: {exc}") from exc
    model.eval()  # type: ignore[no-untyped-call]
    shape = DecoderConfig.of(raw)
    last_only = last_only_arg(model) is not None
    layers, heads, head_dim = shape.layers, shape.kv_heads, shape.head_dim
    hidden, vocab, context = shape.hidden, shape.vocab, shape.context
    past_names = cache_names(layers, PAST)
    present_names = cache_names(layers, PRESENT)
    inputs = ["input_ids", "attention_mask", "position_ids", *past_names]
    outputs = ["logits", *present_names]
    dynamic = _dynamic_axes(past_names, present_names, last_only)

    plan = FeedPlan(
        kind="decoder",
        input_names=tuple(inputs),
        vocab=vocab,
        layers=layers,
        heads=heads,
        head_dim=head_dim,
        max_length=context,
    )
    generation = _generation_settings(folder, raw, context, vocab)
    architecture = str(raw["model_type"])

    return Source(
        module=wrap_decoder(model, layers),
        input_names=inputs,
        output_names=outputs,
        dynamic_axes=dynamic,
        plan=plan,
        description=f"{shape.name} decoder, {layers} layers, hidden {hidden}, vocab {vocab}, "
        f"context {context}",
        # decode steps run back to back: idle ORT threads spinning between them pays (+25% here)
        config={
            "task": "text-generation",
            "generation": generation,
            "runtime": {"allow_spinning": True},
        },
        tokenizer_dir=tokenizer_dir(folder),
        metadata={
            "inferd.architecture": architecture,
            "inferd.num_heads": str(shape.heads),
            "inferd.hidden_size": str(hidden),
        },
        inplace=(
            functools.partial(_inplace, model, raw)
            if architecture in INPLACE_ARCHITECTURES
            else None
        ),
        # (the exporter leaves the one position symbolic; the runtime reads it from here)
        fixed_dims={"logits": {1: 1}} if last_only else {},
    )


def _dynamic_axes(
    past_names: list[str], present_names: list[str], last_only: bool
) -> dict[str, dict[int, str]]:
    """The export's dynamic axes: the batch everywhere, the step's and the cache's lengths."""
    dynamic: dict[str, dict[int, str]] = {
        "input_ids": {0: BATCH_AXIS, 1: "sequence"},
        "attention_mask": {0: BATCH_AXIS, 1: "total_sequence"},
        "position_ids": {0: BATCH_AXIS, 1: "sequence"},
        # the last position's alone is one position, not the step's
        "logits": {0: BATCH_AXIS} if last_only else {0: BATCH_AXIS, 1: "sequence"},
    }
    dynamic.update({n: {0: BATCH_AXIS, 2: "past_sequence"} for n in past_names})
    dynamic.update({n: {0: BATCH_AXIS, 2: "total_sequence"} for n in present_names})
    return dynamic


def _generation_settings(
    folder: Path, raw: dict[str, Any], context: int, vocab: int
) -> dict[str, Any]:
    """The served config's `generation`: the context length, and the end-of-text token of the
    model's config, or of its generation_config.json when that names one in the vocabulary."""
    eos = raw.get("eos_token_id")
    generation: dict[str, Any] = {"context_length": context}
    if isinstance(eos, int) and 0 <= eos < vocab:
        generation["eos_token_id"] = eos
    generation_file = folder / "generation_config.json"
    if generation_file.is_file():
        gen = json.loads(generation_file.read_text())
        if isinstance(gen.get("eos_token_id"), int) and 0 <= gen["eos_token_id"] < vocab:
            generation["eos_token_id"] = gen["eos_token_id"]
    return generation


def _inplace(model: Any, raw: dict[str, Any]) -> Any:
    """The decoder's in-place KV cache graph (GPT-2's or Llama's), from its weights."""
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    if str(raw["model_type"]) == "gpt2":
        from inferd.prep.inplace_decoder import build_inplace_decoder

        return build_inplace_decoder(weights, raw)
    from inferd.prep.inplace_llama import build_inplace_llama

    rotary = model.model.rotary_emb
    return build_inplace_llama(
        weights,
        raw,
        rotary.inv_freq.detach().numpy(),
        float(rotary.attention_scaling),
        str(getattr(rotary, "rope_type", "default")),
    )
