"""OpenAI-compatible endpoints: `POST /v1/embeddings` and `GET /v1/models`.

The `openai` Python client works against these unchanged (base_url ending in /v1). Errors keep
inferd's one error shape (message, stable code, request id).
"""

from __future__ import annotations

import base64
from typing import Literal

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from inferd.errors import InvalidInputError
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.jsonbody import openapi_body
from inferd.server.observe import read_traced_body
from inferd.server.state import header_timeout_s, manager_of, settings_of

router = APIRouter(prefix="/v1", tags=["openai"])


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="A text or a list of texts (token arrays are refused: send text)."
    )
    model: str | None = Field(None, description="A model id from /v1/models.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None


def _texts(value: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    if isinstance(value, str):
        return [value]
    if all(isinstance(item, str) for item in value):
        return [str(item) for item in value]
    raise InvalidInputError(
        "input must be a string or a list of strings; token arrays are not taken"
    )


@router.post(
    "/embeddings", summary="Embeddings (OpenAI)", openapi_extra=openapi_body(EmbeddingsRequest)
)
async def embeddings(request: Request) -> Response:
    body, trace = await read_traced_body(
        request, EmbeddingsRequest, settings_of(request).log_payloads
    )
    texts = _texts(body.input)
    timeout_s = header_timeout_s(request)
    async with cancel_on_disconnect(request.receive):
        served, result = await manager_of(request).embed(
            body.model, texts, body.dimensions, timeout_s, trace
        )
    vectors = result.vectors
    data = []
    for index, vector in enumerate(vectors):
        encoded: object = vector
        if body.encoding_format == "base64":
            encoded = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = int(sum(result.token_counts))
    payload = {
        "object": "list",
        "data": data,
        "model": served.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return Response(
        orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )


@router.get("/models", summary="Models (OpenAI)")
async def models(request: Request) -> Response:
    manager = manager_of(request)
    default_for: dict[str, list[str]] = {}
    for purpose, name in sorted(manager.defaults().items()):
        default_for.setdefault(name, []).append(purpose)
    data = []
    for name, versions in sorted(manager.versions.items()):
        ready = [v for v in versions.values() if v.ready]
        if not ready:
            continue
        served = max(ready, key=lambda v: v.version)
        data.append(
            {
                "id": name,
                "object": "model",
                "created": manager.loaded_at.get(name, 0),
                "owned_by": "inferd",
                "task": served.task,
                "version": str(served.version),
                # the task routes that use this model when a request names none
                "default_for": default_for.get(name, []),
            }
        )
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")
