"""`GET /metrics`: Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import PlainTextResponse, Response

from inferd.errors import NotFoundError
from inferd.observability.metrics import Metrics

router = APIRouter(tags=["observability"])


@router.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> Response:
    registry: Metrics | None = request.app.state.metrics
    if registry is None:
        raise NotFoundError("metrics are off (settings: metrics)")
    return Response(registry.render(), media_type=CONTENT_TYPE_LATEST)
