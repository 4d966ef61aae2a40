"""Task endpoints for text models: `POST /predict` (labels, scores), `POST /embed` and
`POST /rerank` (texts ranked against a query)."""

from __future__ import annotations

import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.requests import Request
from starlette.responses import Response

from inferd.server.body import read_json
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.responses import json_response
from inferd.server.state import engine_of, header_timeout_s


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    texts: list[str] = Field(description="The texts to classify.")
    model: str | None = Field(
        None, description="Default: the one classifier served, or the one marked default."
    )
    version: str | None = Field(
        None,
        description="A version of the model; default: the serving one (or a rollout's choice).",
    )
    top_k: int | None = Field(
        None, ge=1, le=1000, description="Labels per text; when given, each text gets a list."
    )


class EmbedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    texts: list[str] = Field(description="The texts to embed.")
    model: str | None = Field(
        None, description="Default: the one embedding model served, or the one marked default."
    )
    version: str | None = Field(
        None,
        description="A version of the model; default: the serving one (or a rollout's choice).",
    )
    dimensions: int | None = Field(
        None, ge=1, description="A smaller size, where the model allows truncation."
    )


async def predict(request: Request) -> Response:
    started = time.perf_counter()
    body = await read_json(request, PredictRequest, "predict")
    timeout_s = header_timeout_s(request)
    k = body.top_k or 1
    async with cancel_on_disconnect(request.receive):
        served, result = await engine_of(request).classify(
            body.model, body.texts, k, timeout_s, body.version
        )
    nested = body.top_k is not None and body.top_k > 1
    return json_response(
        {
            "labels": [p.labels if nested else p.labels[0] for p in result.predictions],
            "scores": [p.scores if nested else p.scores[0] for p in result.predictions],
            "model": served.model,
            "version": str(served.version),
            "usage": {"tokens": sum(result.token_counts)},
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }
    )


async def embed(request: Request) -> Response:
    started = time.perf_counter()
    body = await read_json(request, EmbedRequest, "embed")
    timeout_s = header_timeout_s(request)
    async with cancel_on_disconnect(request.receive):
        served, result = await engine_of(request).embed(
            body.model, body.texts, body.dimensions, timeout_s, body.version
        )
    return json_response(
        {
            "embeddings": result.vectors,
            "dimensions": int(result.vectors.shape[1]),
            "model": served.model,
            "version": str(served.version),
            "usage": {"tokens": sum(result.token_counts)},
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }
    )


class RerankDocument(BaseModel):
    """Cohere's and Jina's document object."""

    model_config = ConfigDict(extra="forbid", strict=True)
    text: str


class RerankRequest(BaseModel):
    """text-embeddings-inference's `/rerank` body (`texts`, `return_text`), or Infinity's,
    Cohere's and Jina's (`documents`, strings or `{"text": ...}` objects, `return_documents`):
    the answer takes the form of the one asked."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(description="The query each text is scored against.")
    texts: list[str] | None = Field(
        None, description="The texts to rank (text-embeddings-inference's form)."
    )
    documents: list[str | RerankDocument] | None = Field(
        None,
        description="The texts to rank (Infinity's, Cohere's and Jina's form: strings, or "
        '`{"text": ...}` objects); give one of the two.',
    )
    model: str | None = Field(
        None, description="Default: the one reranker served, or the one marked default."
    )
    version: str | None = Field(
        None,
        description="A version of the model; default: the serving one (or a rollout's choice).",
    )
    top_n: int | None = Field(None, ge=1, description="Only the n best; default: all.")
    return_text: bool = Field(False, description="Each result carries its text.")
    return_documents: bool = Field(False, description="The same, in Infinity's and Cohere's words.")
    raw_scores: bool = Field(
        False,
        description="The model's logits instead of their sigmoid (text-embeddings-inference).",
    )

    @model_validator(mode="after")
    def _one_list(self) -> RerankRequest:
        if (self.texts is None) == (self.documents is None):
            raise ValueError("give the texts to rank as `texts` or as `documents` (one of them)")
        return self


async def rerank(request: Request) -> Response:
    started = time.perf_counter()
    body = await read_json(request, RerankRequest, "rerank")
    timeout_s = header_timeout_s(request)
    documents = body.documents or []
    texts = body.texts if body.texts is not None else [_text(d) for d in documents]
    async with cancel_on_disconnect(request.receive):
        served, result = await engine_of(request).rerank(
            body.model, body.query, texts, body.raw_scores, timeout_s, body.version
        )
    order = np.argsort(-np.asarray(result.scores, np.float64), kind="stable")[: body.top_n]
    with_text = body.return_text or body.return_documents
    if body.texts is not None:  # text-embeddings-inference: a list, best first
        return json_response(
            [
                {"index": int(i), "score": float(result.scores[i])}
                | ({"text": texts[i]} if with_text else {})
                for i in order
            ]
        )
    tokens = sum(result.token_counts)
    return json_response(
        {
            "object": "rerank",
            "results": [
                {"index": int(i), "relevance_score": float(result.scores[i])}
                | ({"document": _shown(documents[i])} if with_text else {})
                for i in order
            ],
            "model": served.model,
            "version": str(served.version),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }
    )


def _text(document: str | RerankDocument) -> str:
    return document if isinstance(document, str) else document.text


def _shown(document: str | RerankDocument) -> str | dict[str, str]:
    """A document as a result carries it: in the form it was sent."""
    return document if isinstance(document, str) else {"text": document.text}
