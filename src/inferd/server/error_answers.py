"""The one place where inferd's errors become HTTP answers (the status of each code:
inferd.front.statuses).

Two shapes: inferd's own `{"error": "<message>", "code": 4004, "request_id": "..."}` (the
KServe V2 shape with the code beside it), and on the OpenAI-compatible routes (`/v1/...`, but
for inferd's own `/v1/jobs` and `/v1/status`) OpenAI's `{"error": {"message", "type", "param",
"code"}}` with inferd's numeric code as `code` and the request id beside it, so that OpenAI's
clients show the message in their exception's text.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from inferd.errors import ErrorCode, InferdError, InvalidInputError
from inferd.errors import error_body as inferd_error_body
from inferd.front.statuses import http_status, retry_after_s
from inferd.observability.trace import current_trace
from inferd.server.disconnect import ClientDisconnected
from inferd.server.responses import json_response

log = logging.getLogger(__name__)

CLIENT_CLOSED = 499


class PayloadTooLargeError(InferdError):
    """A body over the size limit: code 4002 with HTTP 413."""

    code = ErrorCode.INPUT_TOO_LONG
    http_status = 413


class ErrorBody(BaseModel):
    """The body of every error response (the KServe V2 shape, with a code and request id)."""

    error: str
    code: int
    request_id: str


class OpenAIError(BaseModel):
    """The error inside an OpenAI-shaped body: OpenAI's fields, inferd's code and request id."""

    message: str
    type: str
    param: str | None
    code: int
    request_id: str


class OpenAIErrorBody(BaseModel):
    """The body of an error on the OpenAI-compatible routes (OpenAI's shape)."""

    error: OpenAIError


_STATUSES = (
    (400, "Bad input (codes 4001-4005)"),
    (401, "A key is needed (4010)"),
    (403, "Forbidden (4030)"),
    (404, "Not found (4040)"),
    (405, "Method not allowed, with Allow (4004)"),
    (413, "Body over the size limit (4002)"),
    (429, "Shed: queue or in-flight limit (4290); the client's on-demand loads (4291)"),
    (500, "Internal error (5000)"),
    (503, "Not ready, draining or over a memory limit (5030)"),
    (504, "Deadline passed (5040)"),
    (507, "Out of memory (5070)"),
)

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description} for status, description in _STATUSES
}
OPENAI_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": OpenAIErrorBody, "description": description}
    for status, description in _STATUSES
}
"""The same answers in OpenAI's shape, for the OpenAPI schema of the OpenAI routes."""


INFERD_V1_PREFIXES = ("/v1/jobs", "/v1/status")
"""Routes under /v1 that are inferd's own, not OpenAI's: they answer in inferd's shape."""

OPENAI_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
"""OpenAI's error `type` by HTTP status; any other status is a `server_error`."""


def openai_shaped(path: str) -> bool:
    """Whether errors on `path` take OpenAI's shape (its OpenAI-compatible routes)."""
    if not path.startswith("/v1/"):
        return False
    return not any(path == prefix or path.startswith(prefix + "/") for prefix in INFERD_V1_PREFIXES)


def error_body(
    status: int, code: int, message: str, request_id: str, path: str = "", param: str | None = None
) -> dict[str, Any]:
    """The body of an error answered on `path` (see the module's docstring for the shapes)."""
    if openai_shaped(path):
        return {
            "error": {
                "message": message,
                "type": OPENAI_TYPES.get(status, "server_error"),
                "param": param,
                "code": code,
                "request_id": request_id,
            }
        }
    return inferd_error_body(code, message, request_id)


def request_id_of(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", ""))


def _mark(request: Request, code: int) -> None:
    """Puts the error code on the request's trace, for its log line and metrics."""
    current_trace().error_code = code


def error_response(
    status: int,
    code: int,
    message: str,
    request_id: str,
    retry_after_s: float | None = None,
    path: str = "",
    param: str | None = None,
) -> Response:
    """An error answer on `path` (its shape depends on the path: `error_body`)."""
    body = error_body(status, code, message, request_id, path, param)
    headers = {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    return json_response(body, status, headers)


def response_for(
    exc: InferdError, request_id: str, path: str = "", param: str | None = None
) -> Response:
    param = param if param is not None else getattr(exc, "param", None)
    return error_response(
        http_status(exc), int(exc.code), exc.message, request_id, retry_after_s(exc), path, param
    )


async def _inferd_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, InferdError):  # registered for InferdError only
        raise exc
    if exc.code is ErrorCode.INTERNAL:
        log.error(
            "internal error",
            exc_info=exc.__cause__ or exc,
            extra={"request_id": request_id_of(request)},
        )
    _mark(request, int(exc.code))
    return response_for(exc, request_id_of(request), request.url.path)


async def _validation_error(request: Request, exc: Exception) -> Response:
    problems = exc.errors() if isinstance(exc, RequestValidationError) else []
    parts = []
    fields = {_field_of(err.get("loc", ())) for err in problems}
    for err in problems[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    message = "invalid request: " + ("; ".join(parts) or "malformed")
    _mark(request, int(ErrorCode.INVALID_INPUT))
    param = next(iter(fields)) if len(fields) == 1 else None
    return response_for(InvalidInputError(message), request_id_of(request), request.url.path, param)


def _field_of(loc: Any) -> str | None:
    """The top-level body field a validation error is about (OpenAI's `param`)."""
    named = [str(p) for p in loc if p != "body"]
    return named[0] if named else None


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
    code = {404: ErrorCode.NOT_FOUND, 413: ErrorCode.INPUT_TOO_LONG}.get(
        status, ErrorCode.INVALID_INPUT if status < 500 else ErrorCode.INTERNAL
    )
    detail = exc.detail if isinstance(exc, StarletteHTTPException) else "internal error"
    allowed = (getattr(exc, "headers", None) or {}).get("Allow")
    if status == 405 and allowed:  # RFC 9110: a 405 names the methods the route takes
        detail = f"{request.method} is not a method of {request.url.path}; it takes {allowed}"
    _mark(request, int(code))
    answer = error_response(
        status, int(code), str(detail), request_id_of(request), path=request.url.path
    )
    if allowed:
        answer.headers["Allow"] = allowed
    return answer


async def _client_gone(request: Request, exc: Exception) -> Response:
    # Never reaches the gone client; nginx's 499 shows the case in access logs.
    return Response(status_code=CLIENT_CLOSED)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ClientDisconnected, _client_gone)
    app.add_exception_handler(ClientDisconnect, _client_gone)  # gone while its body was read
    app.add_exception_handler(InferdError, _inferd_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
