"""OpenAI-compatible endpoints: `POST /v1/embeddings` and `GET /v1/models`.

The `openai` Python client works against these unchanged (base_url ending in /v1). Errors keep
inferd's one error shape (message, stable code, request id).
"""

from __future__ import annotations

import base64
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from inferd.errors import InvalidInputError
from inferd.server.body import read_json
from inferd.server.disconnect import cancel_on_disconnect
from inferd.server.responses import json_response
from inferd.server.state import engine_of, header_timeout_s

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


async def embeddings(request: Request) -> Response:
    body = await read_json(request, EmbeddingsRequest, "embed")
    texts = _texts(body.input)
    timeout_s = header_timeout_s(request)
    async with cancel_on_disconnect(request.receive):
        served, result = await engine_of(request).embed(
            body.model, texts, body.dimensions, timeout_s
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
    return json_response(payload)


@router.get("/models", summary="Models (OpenAI)")
async def models(request: Request) -> Response:
    data = [
        {
            "id": m.name,
            "object": "model",
            "created": m.loaded_at,
            "owned_by": "inferd",
            "task": m.newest.task,
            "version": str(m.newest.version),
            # the task routes that use this model when a request names none
            "default_for": list(m.default_for),
        }
        for m in engine_of(request).registry.served_models()
    ]
    return json_response({"object": "list", "data": data})
