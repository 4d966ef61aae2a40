"""The sample set an accuracy report runs on: texts through the model's own tokenizer (from a
file, one text a line, or generated from varied real sentences), JSONL input tensors, or inputs
generated from the version's sample plan. Deterministic, so two reports compare."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.config.model import ModelConfig
from inferd.corpus import sentences
from inferd.prep.feeds import FeedPlan, Feeds
from inferd.tasks.text_feeds import TextEncoder, find_tokenizer

BATCH = 16
GENERATED_LENGTHS = (8, 16, 32, 64)


class SampleError(ValueError):
    """A sample file that cannot be used (the message names the line)."""


@dataclass
class SampleSet:
    batches: list[Feeds]
    description: str
    count: int


def _text_batches(encoder: TextEncoder, texts: list[str]) -> list[Feeds]:
    config = encoder.config
    batches = []
    for start in range(0, len(texts), BATCH):
        encoded = encoder.encode(texts[start : start + BATCH])
        width = max(encoded.token_counts)
        rows = len(encoded.items)
        feeds: Feeds = {}
        for name, value in encoder.pad_values().items():
            feeds[name] = np.full((rows, width), int(value), dtype=np.int64)
        for row, (item, n) in enumerate(zip(encoded.items, encoded.token_counts, strict=True)):
            for name, array in item.items():
                feeds[name][row, :n] = array[0]
        if config.attention_mask is not None:
            lengths = np.asarray(encoded.token_counts)[:, None]
            feeds[config.attention_mask] = (np.arange(width)[None, :] < lengths).astype(np.int64)
        batches.append(feeds)
    return batches


def _jsonl_batches(path: Path, dtypes: dict[str, str]) -> list[Feeds]:
    batches = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("expected an object of input name -> nested list")
            batches.append(
                {k: np.asarray(v, dtype=dtypes.get(k, "float32")) for k, v in row.items()}
            )
        except ValueError as exc:
            raise SampleError(f"{path}:{number}: {exc}") from exc
    if not batches:
        raise SampleError(f"{path}: no samples")
    return batches


def load_samples(
    path: Path | None,
    count: int,
    config: ModelConfig,
    version_folder: Path,
    plan: FeedPlan,
    dtypes: dict[str, str],
) -> SampleSet:
    if path is not None and path.suffix == ".jsonl":
        batches = _jsonl_batches(path, dtypes)
        return SampleSet(
            batches, f"{path} (input tensors)", sum(len(next(iter(b.values()))) for b in batches)
        )
    if config.kind.tokenizer:
        tokenizer = find_tokenizer(config.tokenizer, version_folder, version_folder.parent)
        encoder = TextEncoder(tokenizer, config.tokenizer, max_texts=BATCH)
        if path is not None:
            texts = [t for t in path.read_text().splitlines() if t.strip()]
            if not texts:
                raise SampleError(f"{path}: no texts")
            source = f"{path} ({len(texts)} texts)"
        else:
            texts = sentences(count)
            source = f"{len(texts)} generated sentences (standard library docstrings)"
        return SampleSet(_text_batches(encoder, texts), source, len(texts))
    if path is not None:
        raise SampleError(f"{path}: a non-text model takes samples as .jsonl input tensors")
    shapes = tuple(
        (8, GENERATED_LENGTHS[i % len(GENERATED_LENGTHS)]) for i in range(max(1, count // 8))
    )
    return SampleSet(plan.cases(shapes, seed=11), f"{count} generated inputs", 8 * len(shapes))
