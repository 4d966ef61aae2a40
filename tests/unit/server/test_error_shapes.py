"""The error body's two shapes: inferd's own, and OpenAI's on its compatible routes."""

from __future__ import annotations

import orjson
import pytest

from inferd.errors import InvalidInputError, NotFoundError, QueueFullError
from inferd.jobs.record import Job, JobState
from inferd.server.error_answers import error_body, openai_shaped, response_for


@pytest.mark.parametrize(
    ("path", "openai"),
    [
        ("/v1/embeddings", True),
        ("/v1/completions", True),
        ("/v1/chat/completions", True),
        ("/v1/models", True),
        ("/v1/no-such-route", True),
        ("/v1/jobs", False),
        ("/v1/jobs/abc", False),
        ("/v1/status", False),
        ("/v1/jobsearch", True),
        ("/embed", False),
        ("/v2/models/m/infer", False),
        ("", False),
    ],
)
def test_which_paths_answer_in_openais_shape(path: str, openai: bool) -> None:
    assert openai_shaped(path) is openai


def test_inferds_shape_keeps_the_message_the_code_and_the_request_id() -> None:
    body = error_body(400, 4004, "input 'x' is missing", "rid-1", "/v2/models/m/infer")
    assert body == {"error": "input 'x' is missing", "code": 4004, "request_id": "rid-1"}


def test_openais_shape_holds_the_message_the_type_the_param_and_inferds_code() -> None:
    body = error_body(400, 4004, "dimensions 64 is not offered", "rid-2", "/v1/embeddings", "n")
    assert body == {
        "error": {
            "message": "dimensions 64 is not offered",
            "type": "invalid_request_error",
            "param": "n",
            "code": 4004,
            "request_id": "rid-2",
        }
    }


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidInputError("bad", param="dimensions"), 400, "invalid_request_error"),
        (NotFoundError("model 'x' not found"), 404, "not_found_error"),
        (QueueFullError("queue full"), 429, "rate_limit_error"),
    ],
)
def test_a_response_on_an_openai_route_is_in_openais_shape(
    error: InvalidInputError, status: int, kind: str
) -> None:
    response = response_for(error, "rid", "/v1/embeddings")
    assert response.status_code == status
    body = orjson.loads(bytes(response.body))["error"]
    assert body["message"] == error.message and body["type"] == kind
    assert body["code"] == int(error.code) and body["request_id"] == "rid"
    assert body["param"] == error.param
    if status == 429:
        assert response.headers["retry-after"] == "1"


def test_a_failed_jobs_reason_reads_either_shape() -> None:
    for shaped in ("/v1/embeddings", "/embed"):
        answer = orjson.dumps(error_body(400, 4004, "dimensions 64 is not offered", "r", shaped))
        job = Job(route=shaped, body=b"{}", state=JobState.FAILED, status=400, result=answer)
        assert job.view()["reason"] == "dimensions 64 is not offered"
