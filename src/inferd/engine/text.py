"""Serving texts on a version: tokenize, queue each text as its own item, pool or classify.

`TextPipeline` is built off the event loop when a text model loads (it reads the tokenizer file
beside the model) and then runs on the loop for every request.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.batching import DynamicBatcher, Timing
from inferd.config.model import ModelConfig
from inferd.errors import InvalidInputError
from inferd.observability.trace import RequestTrace
from inferd.runtime.protocol import Array, TensorSpec
from inferd.tasks.classification import ClassificationTask, Prediction, top_k
from inferd.tasks.embedding import EmbeddingTask
from inferd.tasks.text import EncodedTexts, TextEncoder, find_tokenizer


@dataclass(frozen=True)
class Embeddings:
    vectors: Array
    """[texts, dimension], float32."""
    token_counts: list[int]


@dataclass(frozen=True)
class Classified:
    predictions: list[Prediction]
    probabilities: Array
    token_counts: list[int]


class TextPipeline:
    def __init__(
        self,
        config: ModelConfig,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        version_folder: Path,
    ) -> None:
        tokenizer = config.tokenizer
        path = find_tokenizer(tokenizer, version_folder, version_folder.parent)
        self.encoder = TextEncoder(path, tokenizer, config.max_texts_per_request)
        input_names = {s.name for s in inputs}
        wanted = [tokenizer.input_ids, tokenizer.attention_mask, tokenizer.token_type_ids]
        missing = [n for n in wanted if n is not None and n not in input_names]
        if missing:
            raise ValueError(f"tokenizer inputs {missing} are not inputs of the model")
        extra = input_names - {n for n in wanted if n is not None}
        if extra:
            raise ValueError(
                f"the model also takes {sorted(extra)}; name them in the tokenizer section"
            )
        self.embedding: EmbeddingTask | None = None
        self.classification: ClassificationTask | None = None
        if config.task == "embedding":
            self.embedding = EmbeddingTask(config.embedding, outputs)
            self.output = self.embedding.output
        else:
            self.classification = ClassificationTask(config.classification, outputs)
            self.output = self.classification.output

    def pad_values(self) -> dict[str, float]:
        return self.encoder.pad_values()

    async def _run(
        self,
        batcher: DynamicBatcher,
        texts: Sequence[str],
        deadline: float | None,
        trace: RequestTrace | None,
    ) -> tuple[EncodedTexts, list[dict[str, Array]]]:
        started = time.perf_counter()
        encoded = self.encoder.encode(texts)
        timing = Timing()
        if trace is not None:
            trace.preprocess_s = time.perf_counter() - started
            trace.items = len(texts)
            trace.input_length = sum(encoded.token_counts)
        outputs = await batcher.submit_items(encoded.items, deadline, timing)
        if trace is not None:
            trace.queue_s, trace.inference_s = timing.queue_s, timing.run_s
            trace.batch_size = timing.batch_rows
        return encoded, outputs

    async def embed(
        self,
        batcher: DynamicBatcher,
        texts: Sequence[str],
        deadline: float | None,
        dimensions: int | None = None,
        trace: RequestTrace | None = None,
    ) -> Embeddings:
        task = self.embedding
        if task is None:
            raise InvalidInputError("this model classifies texts; it does not embed them")
        task.check_dimensions(dimensions)
        encoded, outputs = await self._run(batcher, texts, deadline, trace)
        started = time.perf_counter()
        mask_name = self.encoder.config.attention_mask
        vectors = np.stack(
            [
                task.pool(out[self.output], item.get(mask_name) if mask_name else None)
                for out, item in zip(outputs, encoded.items, strict=True)
            ]
        )
        result = Embeddings(task.finish(vectors, dimensions), encoded.token_counts)
        if trace is not None:
            trace.postprocess_s = time.perf_counter() - started
            trace.output_length = int(result.vectors.size)
        return result

    async def classify(
        self,
        batcher: DynamicBatcher,
        texts: Sequence[str],
        k: int,
        deadline: float | None,
        trace: RequestTrace | None = None,
    ) -> Classified:
        task = self.classification
        if task is None:
            raise InvalidInputError("this model embeds texts; use /embed, or a classifier")
        encoded, outputs = await self._run(batcher, texts, deadline, trace)
        started = time.perf_counter()
        logits = np.concatenate([out[self.output].reshape(1, -1) for out in outputs])
        probabilities = task.probabilities(logits)
        result = Classified(
            top_k(probabilities, task.labels, k), probabilities, encoded.token_counts
        )
        if trace is not None:
            trace.postprocess_s = time.perf_counter() - started
            trace.output_length = len(texts) * k
        return result
