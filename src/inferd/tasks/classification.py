"""Text classification: logits to probabilities, label names, top-k."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inferd.config.model import ClassificationConfig
from inferd.errors import InvalidInputError
from inferd.runtime.protocol import Array, TensorSpec
from inferd.tasks.outputs import task_output


@dataclass(frozen=True)
class Prediction:
    labels: list[str]
    scores: list[float]


def softmax(logits: Array, temperature: float = 1.0) -> Array:
    scaled = logits.astype(np.float64) / temperature
    scaled -= scaled.max(axis=-1, keepdims=True)
    exp = np.exp(scaled)
    result: Array = exp / exp.sum(axis=-1, keepdims=True)
    return result


def top_k(probabilities: Array, labels: Sequence[str], k: int) -> list[Prediction]:
    """For each row, the k best labels and their scores, best first."""
    if k < 1:
        raise InvalidInputError("top_k must be at least 1")
    k = min(k, len(labels))
    scores = np.asarray(probabilities, dtype=np.float64)
    order = np.argsort(-scores, axis=-1, kind="stable")[:, :k]
    return [
        Prediction([labels[i] for i in row], [float(scores[r, i]) for i in row])
        for r, row in enumerate(order)
    ]


class ClassificationTask:
    def __init__(self, config: ClassificationConfig, outputs: Sequence[TensorSpec]) -> None:
        spec = task_output(outputs, config.output, "classification.output")
        output = spec.name
        classes = spec.shape[-1]
        labels = list(config.labels)
        if classes > 0 and labels and len(labels) != classes:
            raise ValueError(f"{len(labels)} labels configured, the model gives {classes} logits")
        if not labels:
            if classes <= 0:
                raise ValueError("the number of classes is not in the file: configure labels")
            labels = [f"LABEL_{i}" for i in range(classes)]
        self.output = output
        self.labels = labels
        self._config = config

    def probabilities(self, logits: Array) -> Array:
        if self._config.activation == "sigmoid":
            sigmoid: Array = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            return sigmoid
        return softmax(logits)
