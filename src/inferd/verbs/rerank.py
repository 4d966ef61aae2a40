"""The `rerank` verb: a query and texts in, each text's score against the query out; at
`/rerank` and `/v1/rerank`, in text-embeddings-inference's form (`texts`, an answer that is a
list) or in Infinity's, Cohere's and Jina's (`documents`, an answer with `results`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferd.config.model import ModelConfig
from inferd.runtime.protocol import Array
from inferd.verbs.verb import Form, Served, Verb, VerbBody


@dataclass(frozen=True)
class Reranked:
    scores: Array
    """[texts], float32: each text's score against the query, in the order given."""
    token_counts: list[int]
    """Tokens of each (query, text) pair."""


class Reranker(Protocol):
    """What a kind that accepts `rerank` implements."""

    async def rerank(
        self, query: str, texts: Sequence[str], raw_scores: bool, deadline: float | None
    ) -> Reranked: ...


class RerankDocument(BaseModel):
    """Cohere's and Jina's document object."""

    model_config = ConfigDict(extra="forbid", strict=True)
    text: str


class RerankRequest(VerbBody):
    """text-embeddings-inference's `/rerank` body (`texts`, `return_text`), or Infinity's,
    Cohere's and Jina's (`documents`, strings or `{"text": ...}` objects, `return_documents`):
    the answer takes the form of the one asked."""

    query: str = Field(description="The query each text is scored against.")
    texts: list[str] | None = Field(
        None, description="The texts to rank (text-embeddings-inference's form)."
    )
    documents: list[str | RerankDocument] | None = Field(
        None,
        description="The texts to rank (Infinity's, Cohere's and Jina's form: strings, or "
        '`{"text": ...}` objects); give one of the two.',
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

    @property
    def ranked_texts(self) -> list[str]:
        """The texts to rank, whichever form sent them."""
        if self.texts is not None:
            return self.texts
        return [d if isinstance(d, str) else d.text for d in self.documents or ()]


def agreement(config: ModelConfig, stable: Reranked, candidate: Reranked) -> float:
    """The share of places of the order by score where both versions put the same text."""
    a = np.argsort(-np.asarray(stable.scores, dtype=np.float64), kind="stable")
    b = np.argsort(-np.asarray(candidate.scores, dtype=np.float64), kind="stable")
    if a.shape != b.shape:
        return 0.0
    return float(np.mean(a == b)) if len(a) else 1.0


def _answer(
    body: RerankRequest, request: RerankRequest, result: Reranked, served: Served
) -> object:
    order = np.argsort(-np.asarray(result.scores, np.float64), kind="stable")[: body.top_n]
    with_text = body.return_text or body.return_documents
    if body.texts is not None:  # text-embeddings-inference: a list, best first
        return [
            {"index": int(i), "score": float(result.scores[i])}
            | ({"text": body.texts[i]} if with_text else {})
            for i in order
        ]
    documents = body.documents or []
    tokens = sum(result.token_counts)
    return {
        "object": "rerank",
        "results": [
            {"index": int(i), "relevance_score": float(result.scores[i])}
            | ({"document": _shown(documents[i])} if with_text else {})
            for i in order
        ],
        "model": served.model,
        "version": served.version,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "latency_ms": served.latency_ms,
    }


def _shown(document: str | RerankDocument) -> str | dict[str, str]:
    """A document as a result carries it: in the form it was sent."""
    return document if isinstance(document, str) else {"text": document.text}


async def _run(servable: Reranker, request: RerankRequest, deadline: float | None) -> Reranked:
    return await servable.rerank(request.query, request.ranked_texts, request.raw_scores, deadline)


RERANK: Verb[RerankRequest, Reranked] = Verb(
    name="rerank",
    purpose="rerank",
    does="rerank texts",
    run=_run,
    arguments=lambda request: (request.query, request.ranked_texts, request.raw_scores),
    agree=agreement,
    forms=(
        Form("/rerank", "Rank texts against a query", RerankRequest, "tasks", lambda b: b, _answer),
        Form(
            "/v1/rerank",
            "Rank texts against a query (the path Cohere's and Jina's clients call)",
            RerankRequest,
            "tasks",
            lambda body: body,
            _answer,
        ),
    ),
)
