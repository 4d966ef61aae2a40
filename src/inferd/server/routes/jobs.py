"""Asynchronous jobs: `POST /v1/jobs` queues the body of an inference route (202 and the
job's id); `GET /v1/jobs/{id}` reads where it stands and, once done, its answer."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from inferd.errors import NotFoundError
from inferd.front.keys import bearer
from inferd.server.body import read_json
from inferd.server.job_service import Jobs
from inferd.server.openapi import openapi_body
from inferd.server.responses import json_response

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    route: str = Field(
        description="The inference route that runs it: /embed, /predict, /rerank, /generate, "
        "/v1/embeddings, /v1/completions, /v1/chat/completions, /v2/models/{model}/infer."
    )
    body: dict[str, Any] = Field(description="That route's JSON body (no streaming).")
    callback_url: str | None = Field(
        None,
        description="Where the finished job's record is POSTed (a host the server allows).",
    )


def jobs_of(request: Request) -> Jobs:
    jobs: Jobs = request.app.state.jobs
    return jobs


def api_key(request: Request) -> bytes | None:
    """The request's API key (the middleware checked it, when the server has keys)."""
    authorization = request.headers.get("authorization")
    return bearer(authorization.encode("latin-1")) if authorization is not None else None


@router.post(
    "", status_code=202, summary="Queue an inference job", openapi_extra=openapi_body(JobRequest)
)
async def submit(request: Request) -> Response:
    asked = await read_json(request, JobRequest)
    job = await jobs_of(request).submit(
        asked.route, asked.body, asked.callback_url, api_key(request)
    )
    where = f"/v1/jobs/{job.id}"
    return json_response(
        {**job.view(), "status_url": where}, status=202, headers={"Location": where}
    )


@router.get("/{job_id}", summary="A job: its state and, once done, its answer")
async def status(request: Request, job_id: str) -> Response:
    job = await jobs_of(request).get(job_id, api_key(request))
    if job is None:
        raise NotFoundError(f"no job '{job_id}' (unknown, or its answer expired)")
    return json_response(job.view())
