"""How much a quantized model loses against its fp32 version, in the terms of its task:
cosine similarity of the served embeddings, agreement of the predicted labels, and max |diff|
of every output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.config.model import ModelConfig
from inferd.prep.feeds import Feeds
from inferd.runtime.protocol import TensorSpec
from inferd.tasks.embedding import EmbeddingTask


@dataclass
class Accuracy:
    max_abs: dict[str, float] = field(default_factory=dict)
    value_range: dict[str, float] = field(default_factory=dict)
    cosines: list[float] = field(default_factory=list)
    agreements: list[bool] = field(default_factory=list)

    @property
    def cosine_mean(self) -> float | None:
        return float(np.mean(self.cosines)) if self.cosines else None

    @property
    def cosine_min(self) -> float | None:
        return float(np.min(self.cosines)) if self.cosines else None

    @property
    def agreement(self) -> float | None:
        return float(np.mean(self.agreements)) if self.agreements else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_abs": self.max_abs,
            "value_range": self.value_range,
            "cosine_mean": self.cosine_mean,
            "cosine_min": self.cosine_min,
            "label_agreement": self.agreement,
            "items": len(self.cosines or self.agreements),
        }


def _embedding_task(config: ModelConfig, specs: list[TensorSpec]) -> EmbeddingTask | None:
    if "embed" not in config.kind.verbs:
        return None
    return EmbeddingTask(config.embedding, specs)


def _logits_name(config: ModelConfig, names: list[str]) -> str | None:
    if "classify" in config.kind.verbs:
        return config.classification.output or names[0]
    if "generate" in config.kind.verbs:
        return "logits" if "logits" in names else names[0]
    return None


def compare(
    config: ModelConfig,
    specs: list[TensorSpec],
    batches: list[Feeds],
    reference: Sequence[Sequence[np.ndarray]],
    candidate: Sequence[Sequence[np.ndarray]],
) -> Accuracy:
    names = [s.name for s in specs]
    result = Accuracy()
    embedder = _embedding_task(config, specs)
    logits = _logits_name(config, names)
    mask_name = config.tokenizer.attention_mask
    for feeds, want, got in zip(batches, reference, candidate, strict=True):
        for name, w, g in zip(names, want, got, strict=True):
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            diff = float(np.abs(w64 - g64).max()) if w.size else 0.0
            result.max_abs[name] = max(result.max_abs.get(name, 0.0), diff)
            spread = float(w64.max() - w64.min()) if w.size else 0.0
            result.value_range[name] = max(result.value_range.get(name, 0.0), spread)
        outputs = dict(zip(names, zip(want, got, strict=True), strict=True))
        if embedder is not None:
            w, g = outputs[embedder.output]
            mask = feeds.get(mask_name) if mask_name else None
            for row in range(w.shape[0]):
                m = mask[row : row + 1] if mask is not None else None
                a = embedder.pool(w[row : row + 1], m).astype(np.float64)
                b = embedder.pool(g[row : row + 1].astype(np.float32), m).astype(np.float64)
                norms = float(np.linalg.norm(a) * np.linalg.norm(b))
                cos = float(np.dot(a, b)) / max(norms, 1e-12)
                result.cosines.append(cos)
        if logits is not None:
            w, g = outputs[logits]
            result.agreements.extend((w.argmax(-1) == g.argmax(-1)).ravel().tolist())
    return result
