"""The `classify` verb: texts in, labels and their scores out, at `/predict`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pydantic import Field

from inferd.config.model import ModelConfig
from inferd.runtime.protocol import Array
from inferd.tasks.classification import Prediction
from inferd.verbs.verb import Form, Served, Verb, VerbBody


@dataclass(frozen=True)
class Classified:
    predictions: list[Prediction]
    probabilities: Array
    token_counts: list[int]


class Classifier(Protocol):
    """What a kind that accepts `classify` implements."""

    async def classify(
        self, texts: Sequence[str], k: int, deadline: float | None
    ) -> Classified: ...


class PredictRequest(VerbBody):
    texts: list[str] = Field(description="The texts to classify.")
    top_k: int | None = Field(
        None, ge=1, le=1000, description="Labels per text; when given, each text gets a list."
    )


def agreement(config: ModelConfig, stable: Classified, candidate: Classified) -> float:
    """The share of texts both versions give the same top label."""
    same = [
        a.labels[0] == b.labels[0]
        for a, b in zip(stable.predictions, candidate.predictions, strict=True)
    ]
    return float(np.mean(same)) if same else 1.0


def _answer(
    body: PredictRequest, request: PredictRequest, result: Classified, served: Served
) -> object:
    nested = body.top_k is not None and body.top_k > 1
    return {
        "labels": [p.labels if nested else p.labels[0] for p in result.predictions],
        "scores": [p.scores if nested else p.scores[0] for p in result.predictions],
        "model": served.model,
        "version": served.version,
        "usage": {"tokens": sum(result.token_counts)},
        "latency_ms": served.latency_ms,
    }


async def _run(servable: Classifier, request: PredictRequest, deadline: float | None) -> Classified:
    return await servable.classify(request.texts, request.top_k or 1, deadline)


CLASSIFY: Verb[PredictRequest, Classified] = Verb(
    name="classify",
    purpose="predict",
    does="classify texts",
    run=_run,
    arguments=lambda request: (list(request.texts), request.top_k or 1),
    agree=agreement,
    forms=(
        Form("/predict", "Classify texts", PredictRequest, "tasks", lambda body: body, _answer),
    ),
)
