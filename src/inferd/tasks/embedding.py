"""Embeddings from a model's outputs: mean over the attention mask, CLS, or the model's own
pooled output; optional L2 normalization and Matryoshka truncation.

With an attention mask, mean and CLS pooling run on the whole batch where it ran, on the
runtime's thread (`batch_head`, inferd.runtime.reduction): one reduction a batch, off the
event loop, the mean on the instance's own device; only the pooled vectors leave the runtime
(their time counts in the inference stage)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inferd.config.model import EmbeddingConfig
from inferd.errors import InvalidInputError
from inferd.runtime.protocol import Array, TensorSpec
from inferd.runtime.reduction import Reduction
from inferd.tasks.outputs import task_output


class EmbeddingTask:
    def __init__(self, config: EmbeddingConfig, outputs: Sequence[TensorSpec]) -> None:
        spec = task_output(outputs, config.output, "embedding.output")
        output = spec.name
        want_rank = 2 if config.pooling == "output" else 3
        if spec.rank != want_rank:
            raise ValueError(
                f"pooling '{config.pooling}' needs a rank-{want_rank} output; "
                f"'{output}' has shape {list(spec.shape)}"
            )
        self.output = output
        self.dimension = spec.shape[-1] if spec.shape[-1] > 0 else None
        self._config = config

    def check_dimensions(self, dimensions: int | None) -> None:
        if dimensions is None or dimensions == self.dimension:
            return
        allowed = self._config.dimensions
        if dimensions not in allowed:
            raise InvalidInputError(
                f"dimensions {dimensions} is not offered by this model; "
                f"allowed: {sorted({*allowed, *([self.dimension] if self.dimension else [])})}",
                param="dimensions",
            )

    def batch_head(self, mask: str | None) -> Reduction | None:
        """The reduction of a whole batch's token states to one vector a row (`POOLED`), run
        where the batch ran (inferd.runtime.reduction); None where each text is pooled on its
        own: the model pools itself (`output`), or no attention mask tells the padding apart."""
        mode = self._config.pooling
        if mode == "output" or mask is None:
            return None
        return Reduction(self.output, mask, mode)

    def pool(self, output: Array, mask: Array | None) -> Array:
        """One item's vector from its output ([1, n, h] token states, or [1, h] pooled)."""
        mode = self._config.pooling
        if mode == "output":
            return np.asarray(output[0], dtype=np.float32)
        if mode == "cls":
            return np.asarray(output[0, 0], dtype=np.float32)
        states = output[0]
        if mask is None:
            mean: Array = states.mean(axis=0, dtype=np.float32)
            return mean
        weights = mask[0].astype(np.float32)
        total = float(weights.sum())
        pooled: Array = (weights @ states.astype(np.float32)) / max(total, 1e-9)
        return pooled

    def finish(self, vectors: Array, dimensions: int | None = None) -> Array:
        """[n, h] -> truncated (when asked) and normalized (when configured)."""
        if dimensions is not None:
            vectors = vectors[:, :dimensions]
        if self._config.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        return vectors.astype(np.float32, copy=False)
