"""A job as it is kept: what was asked, where it stands, and how it ended.

A finished job keeps its answer, not its request: the store drops the body when the job
finishes (`body` is then empty). A job the store lost (its record gone before its time to
live ran out, e.g. Redis restarted without its data) is shown as failed with `LOST_REASON`."""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from inferd.errors import ErrorCode, error_body

LOST_REASON = "the job store lost this job"


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass
class Job:
    route: str
    """The inference route that runs it ("/embed", "/v2/models/m/infer", ...)."""
    body: bytes
    """The route's JSON body, as the client sent it."""
    callback_url: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: JobState = JobState.QUEUED
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    """Times a worker began it (more than one: a worker stopped mid-job, another took it)."""
    worker: str | None = None
    """The worker that ran it last."""
    status: int | None = None
    """The HTTP status its route answered with."""
    result: bytes | None = None
    """The route's JSON answer (or its error body, when it failed)."""
    owner: str | None = None
    """A hash of the API key that submitted it (never the key); None: the server had no keys."""
    lost: bool = False
    """The store lost it: only `id` and `created_at` are known."""
    traceparent: str | None = None
    """The W3C `traceparent` of the request that submitted it: its callback carries it on."""

    @property
    def done(self) -> bool:
        return self.state in (JobState.SUCCEEDED, JobState.FAILED)

    @classmethod
    def lost_record(cls, job_id: str, created_at: float) -> Job:
        return cls(
            route="",
            body=b"",
            id=job_id,
            state=JobState.FAILED,
            created_at=created_at,
            lost=True,
        )

    def view(self) -> dict[str, Any]:
        """What a client reads of it (`GET /v1/jobs/{id}`, and a callback's body)."""
        if self.lost:
            return {
                "id": self.id,
                "state": JobState.FAILED.value,
                "reason": LOST_REASON,
                "created_at": self.created_at,
                "error": error_body(ErrorCode.INTERNAL, LOST_REASON),
            }
        shown: dict[str, Any] = {
            "id": self.id,
            "state": self.state.value,
            "route": self.route,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "attempts": self.attempts,
            "worker": self.worker,
        }
        if self.done:
            shown["status_code"] = self.status
            answer = orjson.loads(self.result) if self.result else None
            shown["result" if self.state is JobState.SUCCEEDED else "error"] = answer
            if self.state is JobState.FAILED:
                shown["reason"] = _reason(answer, self.status)
        return shown

    def to_fields(self) -> dict[str, bytes]:
        """As flat byte fields (a Redis hash); None fields are left out."""
        fields: dict[str, bytes] = {}
        for name, value in asdict(self).items():
            if value is None or name == "lost":
                continue
            fields[name] = value if isinstance(value, bytes) else str(value).encode()
        return fields

    @classmethod
    def from_fields(cls, fields: dict[bytes, bytes]) -> Job:
        text = {k.decode(): v for k, v in fields.items()}

        def number(name: str) -> float | None:
            return float(text[name]) if name in text else None

        status = number("status")
        return cls(
            route=text["route"].decode(),
            body=text.get("body", b""),
            callback_url=text["callback_url"].decode() if "callback_url" in text else None,
            id=text["id"].decode(),
            state=JobState(text["state"].decode()),
            created_at=float(text["created_at"]),
            started_at=number("started_at"),
            finished_at=number("finished_at"),
            attempts=int(text.get("attempts", b"0")),
            worker=text["worker"].decode() if "worker" in text else None,
            status=int(status) if status is not None else None,
            result=text.get("result"),
            owner=text["owner"].decode() if "owner" in text else None,
            traceparent=text["traceparent"].decode() if "traceparent" in text else None,
        )


def _reason(answer: object, status: int | None) -> str:
    """A failed job's reason in words: its error's message, else its status."""
    if isinstance(answer, dict):
        error = answer.get("error")
        if isinstance(error, dict):  # OpenAI's shape (the /v1 routes)
            error = error.get("message")
        if isinstance(error, str):
            return error
    return f"its route answered status {status}"
