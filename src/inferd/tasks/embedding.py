"""Embeddings from a model's outputs: mean over the attention mask, CLS, or the model's own
pooled output; optional L2 normalization and Matryoshka truncation.

With an attention mask, mean and CLS pooling run on the whole batch where it ran, on the
runtime's thread (`batch_head`): one vectorized reduction a batch, off the event loop, and only
the pooled vectors leave the runtime's thread (their time counts in the inference stage)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inferd.config.model import EmbeddingConfig
from inferd.errors import InvalidInputError
from inferd.runtime.protocol import Array, Bound, Head, TensorSpec
from inferd.tasks.outputs import task_output

POOLED = "inferd_pooled"
"""The output a batch head writes: one pooled vector a row, float32."""


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

    def batch_head(self, mask: str | None) -> Head | None:
        """The reduction of a whole batch's token states to one vector a row (`POOLED`), run
        where the batch ran; None where each text is pooled on its own: the model pools
        itself (`output`), or no attention mask tells the padding apart."""
        mode = self._config.pooling
        if mode == "output" or mask is None:
            return None
        output = self.output

        def head(feeds: Bound, outputs: dict[str, Array]) -> dict[str, Array]:
            states = outputs[output]
            weights = np.asarray(feeds[mask]) != 0
            if mode == "cls":  # the first token each row holds (padding on either side)
                first = weights.argmax(axis=1)
                pooled = states[np.arange(len(states)), first]
                return {POOLED: np.asarray(pooled, dtype=np.float32)}
            counts = np.maximum(weights.sum(axis=1, keepdims=True), 1).astype(np.float32)
            with np.errstate(invalid="ignore", over="ignore"):
                summed = np.matmul(
                    weights[:, None, :].astype(np.float32), states.astype(np.float32, copy=False)
                )[:, 0, :]
            for row in np.flatnonzero(~np.isfinite(summed).all(axis=1)):
                # a weight of 0 times an inf or NaN in the padding (a left-padded causal
                # model's masked rows, an fp16 overflow) is NaN: sum the row's own tokens
                summed[row] = states[row, weights[row]].astype(np.float32).sum(axis=0)
            return {POOLED: summed / counts}

        return head

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
