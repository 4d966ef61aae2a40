"""Triton's repository extension: the index, and loading and unloading models (admin keys)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from inferd.server.state import engine_of

router = APIRouter(prefix="/v2/repository", tags=["repository"])


@router.post("/index", summary="Every model and version with its state")
async def index(request: Request) -> Response:
    return Response(
        orjson.dumps(engine_of(request).registry.index()), media_type="application/json"
    )


@router.post("/models/{model}/load", summary="Load or reload a model (admin key)")
async def load(request: Request, model: str) -> Response:
    served = await engine_of(request).loader.load_model(model)
    body = {"name": model, "version": str(served.version), "state": served.state.value}
    return Response(orjson.dumps(body), media_type="application/json")


@router.post("/models/{model}/unload", summary="Drain and unload a model (admin key)")
async def unload(request: Request, model: str) -> Response:
    await engine_of(request).loader.unload_model(model)
    return Response(
        orjson.dumps({"name": model, "state": "UNAVAILABLE"}), media_type="application/json"
    )
