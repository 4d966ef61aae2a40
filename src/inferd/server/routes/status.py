"""The status page (`GET /`): one HTML file with its script and styles inline (no build step,
nothing fetched from elsewhere) that reads `GET /v1/status` every two seconds and draws it.
Both are open, as /metrics is: they show what the metrics show."""

from __future__ import annotations

from functools import cache
from importlib import resources

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from inferd.observability.live import LiveWindow
from inferd.server.job_service import Jobs
from inferd.server.state import engine_of
from inferd.server.status_view import snapshot

router = APIRouter(tags=["status"])


@cache
def _page() -> bytes:
    return (resources.files("inferd.server") / "static" / "status.html").read_bytes()


@router.get("/", summary="The status page", include_in_schema=False)
async def page() -> Response:
    return Response(
        _page(),
        media_type="text/html; charset=utf-8",
        headers={
            "cache-control": "no-cache",
            # everything the page needs is in it or on this server
            "content-security-policy": "default-src 'none'; script-src 'unsafe-inline'; "
            "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
        },
    )


@router.get("/v1/status", summary="Models, versions, rollouts and the last seconds of traffic")
async def status(request: Request) -> Response:
    live: LiveWindow = request.app.state.live
    jobs: Jobs = request.app.state.jobs
    body = snapshot(
        engine_of(request),
        live,
        {"store": jobs.store.kind, "running": jobs.worker.running},
    )
    return Response(orjson.dumps(body), media_type="application/json")
