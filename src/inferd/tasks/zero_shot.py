"""Zero-shot classification over an embedding model: label descriptions are embedded once when
the model loads; a text's scores are a temperature softmax over its cosine similarities."""

from __future__ import annotations

import numpy as np

from inferd.config.model import ZeroShotConfig
from inferd.runtime.protocol import Array
from inferd.tasks.classification import softmax


class ZeroShotTask:
    def __init__(self, config: ZeroShotConfig) -> None:
        self.labels = [label.name for label in config.labels]
        self.descriptions = [label.description or label.name for label in config.labels]
        self._temperature = config.temperature
        self._label_vectors: Array | None = None

    def set_label_vectors(self, vectors: Array) -> None:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self._label_vectors = vectors / np.maximum(norms, 1e-12)

    @property
    def ready(self) -> bool:
        return self._label_vectors is not None

    def probabilities(self, text_vectors: Array) -> Array:
        if self._label_vectors is None:
            raise RuntimeError("label vectors are not computed yet")
        norms = np.linalg.norm(text_vectors, axis=1, keepdims=True)
        cosine = (text_vectors / np.maximum(norms, 1e-12)) @ self._label_vectors.T
        return softmax(cosine, self._temperature)
