"""The engine's one entry (`Engine.serve`) asked for each verb, as the tests ask it."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.engine import Engine, Version
from inferd.runtime.protocol import Array, Feeds
from inferd.verbs.classify import CLASSIFY, Classified, PredictRequest
from inferd.verbs.embed import EMBED, Embeddings, EmbedRequest
from inferd.verbs.infer import INFER, TensorRequest
from inferd.verbs.rerank import RERANK, Reranked, RerankRequest


async def infer(
    engine: Engine,
    model: str,
    version: str | None,
    feeds: Feeds,
    output_names: Sequence[str] | None = None,
    timeout_s: float | None = None,
) -> tuple[Version, dict[str, Array]]:
    return await engine.serve(
        INFER, TensorRequest(model, version, feeds, output_names or ()), timeout_s
    )


async def embed(
    engine: Engine, model: str | None, texts: Sequence[str], dimensions: int | None = None
) -> tuple[Version, Embeddings]:
    asked = EmbedRequest(texts=list(texts), model=model, dimensions=dimensions)
    return await engine.serve(EMBED, asked)


async def classify(
    engine: Engine, model: str | None, texts: Sequence[str], k: int = 1
) -> tuple[Version, Classified]:
    return await engine.serve(CLASSIFY, PredictRequest(texts=list(texts), model=model, top_k=k))


async def rerank(
    engine: Engine, model: str | None, query: str, texts: Sequence[str], raw: bool = False
) -> tuple[Version, Reranked]:
    asked = RerankRequest(query=query, texts=list(texts), model=model, raw_scores=raw)
    return await engine.serve(RERANK, asked)
