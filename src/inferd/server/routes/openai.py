"""OpenAI's `GET /v1/models` (its embeddings are a form of the `embed` verb,
inferd.verbs.embed; its completions and chat, inferd.server.routes.completions and .chat).

The `openai` Python client works against these unchanged (base_url ending in /v1). Errors keep
inferd's one error shape (message, stable code, request id).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from inferd.server.responses import json_response
from inferd.server.state import engine_of

router = APIRouter(prefix="/v1", tags=["openai"])


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
