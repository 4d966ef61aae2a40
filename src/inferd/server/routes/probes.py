"""Probes: `/health` and `/v2/health/live` (liveness), `/ready` and `/v2/health/ready`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from inferd.server.responses import json_response
from inferd.server.state import engine_of, settings_of

router = APIRouter(tags=["health"])


class ReadinessBody(BaseModel):
    ready: bool
    reason: str
    in_flight: int
    models: dict[str, Any]
    jobs: dict[str, Any] | None = None
    """The job store: whether it answers (it does not decide readiness: inference goes on
    without it)."""


READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": ReadinessBody, "description": "Ready"},
    503: {"model": ReadinessBody, "description": "Not ready: loading, draining, or a model failed"},
}


def _live() -> Response:
    return json_response(b'{"live":true}')


def _ready(request: Request) -> Response:
    engine = engine_of(request)
    readiness = engine.readiness(settings_of(request).strict_readiness)
    body = {
        "ready": readiness.ready,
        "reason": readiness.reason,
        "in_flight": engine.in_flight,
        "models": readiness.models,
    }
    jobs = getattr(request.app.state, "jobs", None)
    if jobs is not None:
        body["jobs"] = jobs.detail()
    return json_response(body, 200 if readiness.ready else 503)


@router.get("/health", summary="Liveness: 200 while the process serves HTTP")
async def health() -> Response:
    return _live()


@router.get("/v2/health/live", summary="V2 liveness")
async def v2_live() -> Response:
    return _live()


@router.get(
    "/ready",
    summary="Readiness: 200 when every model is loaded; 503 with the reason",
    responses=READY_RESPONSES,
)
async def ready(request: Request) -> Response:
    return _ready(request)


@router.get("/v2/health/ready", summary="V2 readiness", responses=READY_RESPONSES)
async def v2_ready(request: Request) -> Response:
    return _ready(request)
