"""What `inferd export` exports: a Hugging Face model folder on disk or a `module:factory`,
made into a `Source` (inferd.prep.source_record)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from inferd.prep.feeds import FeedPlan, spec_plan
from inferd.prep.source_record import Feeds, Source, SourceError, tokenizer_dir
from inferd.prep.spec import BATCH_AXIS, ModuleSpec

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
)
ENCODER_TYPES = {
    "bert",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "electra",
    "mpnet",
    "albert",
    "camembert",
    "deberta",
    "deberta-v2",
}
DECODER_TYPES = {"gpt2", "llama"}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def load_source(ref: str, spec: ModuleSpec | None = None) -> Source:
    """A folder path -> a Hugging Face source; `package.module:factory` -> a module source."""
    path = Path(ref).expanduser()
    if path.exists():
        if spec is not None:
            raise SourceError(f"{ref}: an input spec is for a module:factory source, not a folder")
        return _hf_source(path)
    if ":" in ref and not ref.startswith((".", "/")):
        return _module_source(ref, spec)
    raise SourceError(
        f"{ref}: neither an existing model folder nor a 'package.module:factory' reference"
    )


# -- module:factory -----------------------------------------------------------------------------


def _made_module(ref: str, module_name: str, factory_name: str) -> Any:
    """The `torch.nn.Module` that `module_name:factory_name` makes (imported as `python -m`
    and uvicorn import: this folder's modules too)."""
    import torch

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise SourceError(f"{ref}: cannot import: {exc}") from exc
    module = factory()
    if not isinstance(module, torch.nn.Module):
        raise SourceError(f"{ref}: the factory returned {type(module).__name__}, not a nn.Module")
    return module


def _module_source(ref: str, spec: ModuleSpec | None) -> Source:
    import torch

    module_name, _, factory_name = ref.partition(":")
    if spec is None:
        raise SourceError(
            f"{ref}: a module needs an input spec: --input NAME:DIMS:DTYPE (repeatable) or "
            "--spec FILE.yaml"
        )
    module = _made_module(ref, module_name, factory_name)
    params = [
        p
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(params) < len(spec.inputs):
        raise SourceError(
            f"{ref}: forward takes {len(params)} inputs, the spec gives {len(spec.inputs)}"
        )
    axes = spec.axis_names
    # distinct, unusual sizes per axis name so that output axes can be matched to them
    trace_sizes = dict(zip(axes, (3, 13, 17, 19, 23, 29), strict=False))

    def trace_feeds(rng: np.random.Generator) -> Feeds:
        return {s.name: s.sample(trace_sizes, rng) for s in spec.inputs}

    with torch.no_grad():
        module.eval()
        sample = trace_feeds(np.random.default_rng(0))
        out = module(*(torch.from_numpy(v) for v in sample.values()))
    outs = out if isinstance(out, tuple | list) else (out,)
    names = list(spec.outputs) or [
        f"output_{i}" if len(outs) > 1 else "output" for i in range(len(outs))
    ]
    if len(names) != len(outs):
        raise SourceError(
            f"{ref}: the spec names {len(names)} outputs, forward returns {len(outs)}"
        )
    by_size = {v: k for k, v in trace_sizes.items()}
    dynamic = {s.name: s.dynamic_axes for s in spec.inputs if s.dynamic_axes}
    for name, tensor in zip(names, outs, strict=True):
        found = {i: by_size[d] for i, d in enumerate(tensor.shape) if d in by_size}
        found.update(spec.output_axes.get(name, {}))
        if found:
            dynamic[name] = found
    return Source(
        module=module,
        input_names=[s.name for s in spec.inputs],
        output_names=names,
        dynamic_axes=dynamic,
        plan=spec_plan(list(spec.inputs)),
        description=f"{ref} ({type(module).__name__})",
        config={"task": "tensor"},
        metadata={"inferd.source": ref},
    )


# -- Hugging Face folders -----------------------------------------------------------------------


def _hf_source(folder: Path) -> Source:
    if not folder.is_dir():
        raise SourceError(f"{folder}: not a folder")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise SourceError(f"{folder}: not a model folder (no config.json)")
    if not any((folder / w).is_file() for w in WEIGHT_FILES):
        raise SourceError(f"{folder}: no weights ({' or '.join(WEIGHT_FILES)})")
    raw = json.loads(config_file.read_text())
    model_type = raw.get("model_type")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a folder on disk, never a hub download
    if model_type in ENCODER_TYPES:
        return _encoder_source(folder, raw)
    if model_type in DECODER_TYPES:
        return _decoder_source(folder, raw)
    raise SourceError(
        f"{folder}: model_type '{model_type}' is not supported; encoders: "
        f"{', '.join(sorted(ENCODER_TYPES))}; decoders: {', '.join(sorted(DECODER_TYPES))}. "
        "Other models export as a module:factory with an input spec."
    )


def _sbert_pooling(folder: Path) -> tuple[str, bool] | None:
    """(pooling, normalize) from a sentence-transformers folder, None for other folders."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return None
    modules = json.loads(modules_file.read_text())
    pooling, normalize = "mean", False
    for m in modules:
        kind = str(m.get("type", ""))
        if kind.endswith("Pooling"):
            cfg_file = folder / m.get("path", "") / "config.json"
            cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
            if cfg.get("pooling_mode_cls_token"):
                pooling = "cls"
        elif kind.endswith("Normalize"):
            normalize = True
    return pooling, normalize


class _Encoder:
    """Builds the positional wrapper lazily so that torch is only imported on use."""

    @staticmethod
    def wrap(model: Any, input_names: list[str], outputs: list[str]) -> Any:
        import torch

        class EncoderExport(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
                named = dict(zip(input_names, tensors, strict=True))
                result = self.model(**named, return_dict=True)
                return tuple(getattr(result, name) for name in outputs)

        return EncoderExport()


ENCODER_BATCHING = {
    "max_queue_delay_ms": 2,
    "max_batch_tokens": 4096,
    "length_grouping": True,
    "max_padding_waste": 0.1,
}
"""An exported encoder's dynamic batching, in the config written beside it."""


def _encoder_source(folder: Path, raw: dict[str, Any]) -> Source:
    from transformers import AutoModel, AutoModelForSequenceClassification

    architectures = raw.get("architectures") or []
    classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    loader = AutoModelForSequenceClassification if classifier else AutoModel
    try:
        model = loader.from_pretrained(
            str(folder), local_files_only=True, attn_implementation="eager"
        )
    except (OSError, ValueError) as exc:
        raise SourceError(f"{folder}: cannot load the model: {exc}") from exc
    model.eval()
    accepted = inspect.signature(model.forward).parameters
    input_names = ["input_ids", "attention_mask"]
    if "token_type_ids" in accepted and int(raw.get("type_vocab_size", 0)) > 1:
        input_names.append("token_type_ids")
    sbert = _sbert_pooling(folder)
    config: dict[str, Any] = {"max_batch_size": 32, "dynamic_batching": dict(ENCODER_BATCHING)}
    max_positions = int(raw.get("max_position_embeddings", 512))
    max_tokens = min(max_positions, 512)
    sbert_file = folder / "sentence_bert_config.json"
    if sbert_file.is_file():  # sentence-transformers' own sequence limit
        max_tokens = int(json.loads(sbert_file.read_text()).get("max_seq_length", max_tokens))
    tokenizer: dict[str, Any] = {"max_tokens": max_tokens, "truncate": True}
    if "token_type_ids" in input_names:
        tokenizer["token_type_ids"] = "token_type_ids"
    outputs, task, description = _encoder_task(raw, classifier, sbert)
    config.update(task)
    config["tokenizer"] = tokenizer
    dynamic = {n: {0: BATCH_AXIS, 1: "sequence"} for n in input_names}
    dynamic["last_hidden_state"] = {0: BATCH_AXIS, 1: "sequence"}
    dynamic["logits"] = {0: BATCH_AXIS}
    plan = FeedPlan(
        kind="encoder",
        input_names=tuple(input_names),
        vocab=int(raw["vocab_size"]),
        max_length=max_positions,
    )
    return Source(
        module=_Encoder.wrap(model, input_names, outputs),
        input_names=input_names,
        output_names=outputs,
        dynamic_axes={k: v for k, v in dynamic.items() if k in input_names + outputs},
        plan=plan,
        description=description,
        config=config,
        tokenizer_dir=tokenizer_dir(folder),
        metadata={
            "inferd.architecture": "bert",
            "inferd.num_heads": str(raw.get("num_attention_heads", 0)),
            "inferd.hidden_size": str(raw.get("hidden_size", 0)),
        },
    )


def _encoder_task(
    raw: dict[str, Any], classifier: bool, sbert: tuple[str, bool] | None
) -> tuple[list[str], dict[str, Any], str]:
    """What an encoder serves, from its config: its outputs, its config's task section, and
    its description. One logit a text: a cross-encoder's score (reranks pairs); more: a text
    classifier's labels; none (no classification head): embeddings, pooled as
    sentence-transformers' config says (else mean pooling)."""
    architectures = raw.get("architectures") or []
    id2label = raw.get("id2label") or {}
    if classifier and len(id2label) == 1:
        task = {"task": "rerank", "rerank": {"output": "logits", "activation": "sigmoid"}}
        return ["logits"], task, f"{architectures[0]} cross-encoder, reranks (query, text) pairs"
    if classifier:
        labels = [str(id2label.get(str(i), i)) for i in range(len(id2label))]
        multi = raw.get("problem_type") == "multi_label_classification"
        task = {
            "task": "text-classification",
            "classification": {"labels": labels, "activation": "sigmoid" if multi else "softmax"},
        }
        return ["logits"], task, f"{architectures[0]} text classifier, {len(labels)} labels"
    pooling, normalize = sbert or ("mean", False)
    task = {
        "task": "embedding",
        "embedding": {"pooling": pooling, "normalize": normalize, "output": "last_hidden_state"},
    }
    return (
        ["last_hidden_state"],
        task,
        f"{raw.get('model_type')} encoder, embeddings ({pooling} pooling)",
    )


def _decoder_source(folder: Path, raw: dict[str, Any]) -> Source:
    from inferd.prep.decoder_export import (
        decoder_source,  # (torch and transformers: when exporting)
    )

    return decoder_source(folder, raw)
