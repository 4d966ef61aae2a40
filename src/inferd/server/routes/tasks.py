"""Task endpoints for text models: `POST /predict` (labels, scores) and `POST /embed`."""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from inferd.server.body import read_json
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.jsonbody import openapi_body
from inferd.server.state import engine_of, header_timeout_s

router = APIRouter(tags=["tasks"])


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


def _json(body: object) -> Response:
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )


@router.post("/predict", summary="Classify texts", openapi_extra=openapi_body(PredictRequest))
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
    return _json(
        {
            "labels": [p.labels if nested else p.labels[0] for p in result.predictions],
            "scores": [p.scores if nested else p.scores[0] for p in result.predictions],
            "model": served.model,
            "version": str(served.version),
            "usage": {"tokens": sum(result.token_counts)},
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }
    )


@router.post("/embed", summary="Embed texts", openapi_extra=openapi_body(EmbedRequest))
async def embed(request: Request) -> Response:
    started = time.perf_counter()
    body = await read_json(request, EmbedRequest, "embed")
    timeout_s = header_timeout_s(request)
    async with cancel_on_disconnect(request.receive):
        served, result = await engine_of(request).embed(
            body.model, body.texts, body.dimensions, timeout_s, body.version
        )
    return _json(
        {
            "embeddings": result.vectors,
            "dimensions": int(result.vectors.shape[1]),
            "model": served.model,
            "version": str(served.version),
            "usage": {"tokens": sum(result.token_counts)},
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }
    )
