"""Triton's repository extension: the index, and loading and unloading models; and rollouts
of a new version (all admin keys)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from inferd.server.body import read_json
from inferd.server.openapi import openapi_body
from inferd.server.responses import json_response
from inferd.server.state import engine_of

router = APIRouter(prefix="/v2/repository", tags=["repository"])


@router.post("/index", summary="Every model and version with its state")
async def index(request: Request) -> Response:
    return json_response(engine_of(request).repository_index())


@router.post("/models/{model}/load", summary="Load or reload a model (admin key)")
async def load(request: Request, model: str) -> Response:
    served, evicted = await engine_of(request).load_model(model)
    body = {
        "name": model,
        "version": str(served.version),
        "state": served.state.value,
        # the on-demand versions its load made room for (inferd's own field)
        "evicted": [{"name": v.model, "version": str(v.version)} for v in evicted],
    }
    return json_response(body)


@router.post("/models/{model}/unload", summary="Drain and unload a model (admin key)")
async def unload(request: Request, model: str) -> Response:
    await engine_of(request).unload_model(model)
    return json_response({"name": model, "state": "UNAVAILABLE"})


class RolloutAction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    action: Literal["start", "promote", "rollback", "abort"] = Field(
        description="start: the candidate takes the first step's share; promote: it serves all "
        "traffic now; rollback: the stable version takes all back; abort: the same, unjudged."
    )
    to: int | None = Field(
        None, ge=1, description="start: the candidate version (default: the newest folder)."
    )


@router.get("/models/{model}/rollout", summary="A model's rollout: step, share, decisions")
async def rollout_status(request: Request, model: str) -> Response:
    return json_response(engine_of(request).rollouts.view.status(model))


@router.post(
    "/models/{model}/rollout",
    summary="Start, promote, roll back or abort a rollout (admin key)",
    openapi_extra=openapi_body(RolloutAction),
)
async def rollout(request: Request, model: str) -> Response:
    body = await read_json(request, RolloutAction)
    rollouts = engine_of(request).rollouts
    if body.action == "start":
        state = await rollouts.start(model, body.to)
    elif body.action == "promote":
        state = await rollouts.promote(model)
    else:
        state = await rollouts.rollback(model, abort=body.action == "abort")
    return json_response(state)
