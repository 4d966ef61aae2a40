"""The status page (`GET /`): one HTML file with its styles inline and the current status
written into it on the server (inferd.server.status_page: it paints at once, scripts or
not), and its script beside it (`GET /status.js`; no build step, nothing fetched from
elsewhere) that reads `GET /v1/status` every two seconds and draws it. All are open, as
/metrics is: they show what the metrics show. The page's policy lets no script run but that
file: no inline script, so a status that slipped past the escaping could still not run as
code."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from inferd.observability.live import LiveWindow
from inferd.server.job_service import Jobs
from inferd.server.responses import json_response
from inferd.server.state import engine_of
from inferd.server.status_page import render
from inferd.server.status_view import snapshot

router = APIRouter(tags=["status"])


@cache
def _static(name: str) -> bytes:
    return (resources.files("inferd.server") / "static" / name).read_bytes()


def _snapshot(request: Request) -> dict[str, Any]:
    live: LiveWindow = request.app.state.live
    jobs: Jobs = request.app.state.jobs
    return snapshot(
        engine_of(request), live, {"store": jobs.store.kind, "running": jobs.worker.running}
    )


@router.api_route("/", methods=["GET", "HEAD"], summary="The status page", include_in_schema=False)
async def page(request: Request) -> Response:
    return Response(
        render(_static("status.html").decode(), _snapshot(request)),
        media_type="text/html; charset=utf-8",
        headers={
            "cache-control": "no-cache",
            # everything the page needs is in it or on this server; its one script is a file
            "content-security-policy": "default-src 'none'; script-src 'self'; "
            "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
        },
    )


@router.api_route(
    "/status.js",
    methods=["GET", "HEAD"],
    summary="The status page's script",
    include_in_schema=False,
)
async def script() -> Response:
    return Response(
        _static("status.js"),
        media_type="text/javascript; charset=utf-8",
        headers={"cache-control": "no-cache", "x-content-type-options": "nosniff"},
    )


@router.get("/v1/status", summary="Models, versions, rollouts and the last seconds of traffic")
async def status(request: Request) -> Response:
    return json_response(_snapshot(request))
