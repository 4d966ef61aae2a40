"""The `embed` verb: texts in, one vector each out; at `/embed` (inferd's form) and at
`/v1/embeddings` (OpenAI's, which the `openai` client calls)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from inferd.config.model import ModelConfig
from inferd.errors import InvalidInputError
from inferd.runtime.protocol import Array
from inferd.verbs.verb import Form, Served, Verb, VerbBody


@dataclass(frozen=True)
class Embeddings:
    vectors: Array
    """[texts, dimension], float32."""
    token_counts: list[int]


class Embedder(Protocol):
    """What a kind that accepts `embed` implements."""

    async def embed(
        self, texts: Sequence[str], deadline: float | None, dimensions: int | None = None
    ) -> Embeddings: ...


class EmbedRequest(VerbBody):
    texts: list[str] = Field(description="The texts to embed.")
    dimensions: int | None = Field(
        None, ge=1, description="A smaller size, where the model allows truncation."
    )


class EmbeddingsRequest(BaseModel):
    """OpenAI's body."""

    model_config = ConfigDict(extra="forbid")

    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="A text or a list of texts (token arrays are refused: send text)."
    )
    model: str | None = Field(None, description="A model id from /v1/models.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None


def agreement(config: ModelConfig, stable: Embeddings, candidate: Embeddings) -> float:
    """The mean cosine of the two versions' vectors (0 when their sizes differ)."""
    a = np.asarray(stable.vectors, dtype=np.float64)
    b = np.asarray(candidate.vectors, dtype=np.float64)
    if a.shape != b.shape:
        return 0.0
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosine = np.sum(a * b, axis=1) / np.where(norms == 0, 1.0, norms)
    return float(np.clip(cosine.mean(), 0.0, 1.0)) if len(cosine) else 1.0


def _answer(
    body: EmbedRequest, request: EmbedRequest, result: Embeddings, served: Served
) -> object:
    return {
        "embeddings": result.vectors,
        "dimensions": int(result.vectors.shape[1]),
        "model": served.model,
        "version": served.version,
        "usage": {"tokens": sum(result.token_counts)},
        "latency_ms": served.latency_ms,
    }


def _from_openai(body: EmbeddingsRequest) -> EmbedRequest:
    value = body.input
    if isinstance(value, str):
        texts = [value]
    elif all(isinstance(item, str) for item in value):
        texts = [str(item) for item in value]
    else:
        raise InvalidInputError(
            "input must be a string or a list of strings; token arrays are not taken"
        )
    return EmbedRequest.model_construct(
        texts=texts, model=body.model, version=None, dimensions=body.dimensions
    )


def _openai_answer(
    body: EmbeddingsRequest, request: EmbedRequest, result: Embeddings, served: Served
) -> object:
    data = []
    for index, vector in enumerate(result.vectors):
        encoded: object = vector
        if body.encoding_format == "base64":
            encoded = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = int(sum(result.token_counts))
    return {
        "object": "list",
        "data": data,
        "model": served.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def _run(servable: Embedder, request: EmbedRequest, deadline: float | None) -> Embeddings:
    return await servable.embed(request.texts, deadline, request.dimensions)


EMBED: Verb[EmbedRequest, Embeddings] = Verb(
    name="embed",
    purpose="embed",
    does="embed texts",
    run=_run,
    arguments=lambda request: (list(request.texts), request.dimensions),
    agree=agreement,
    forms=(
        Form("/embed", "Embed texts", EmbedRequest, "tasks", lambda body: body, _answer),
        Form(
            "/v1/embeddings",
            "Embeddings (OpenAI)",
            EmbeddingsRequest,
            "openai",
            _from_openai,
            _openai_answer,
        ),
    ),
)
