"""The one table from inferd's error codes to HTTP statuses, and what an error asks of its
client: HTTP answers with the status, gRPC records it (a call's metrics and log line carry the
HTTP status its code maps to) and both send the same `Retry-After`."""

from __future__ import annotations

from inferd.errors import ErrorCode, InferdError

HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.EMPTY_INPUT: 400,
    ErrorCode.INPUT_TOO_LONG: 400,
    ErrorCode.ENCODING: 400,
    ErrorCode.INVALID_INPUT: 400,
    ErrorCode.TOO_MANY_ITEMS: 400,
    ErrorCode.INVALID_GRAMMAR: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.QUEUE_FULL: 429,
    ErrorCode.TOO_MANY_LOADS: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.OUT_OF_MEMORY: 507,
    ErrorCode.MODEL_TOO_LARGE: 507,
    ErrorCode.INTERNAL: 500,
}


def http_status(exc: InferdError) -> int:
    """The error's own status where it has one (a body over the limit: 413), else its code's."""
    return int(getattr(exc, "http_status", None) or HTTP_STATUS[exc.code])


def retry_after_s(exc: InferdError) -> float | None:
    """When the client may try again: the error's own estimate; a second for a full queue or
    an unavailable server that gave none; None for everything else."""
    retry = exc.retry_after_s
    if retry is None and exc.code in (ErrorCode.QUEUE_FULL, ErrorCode.UNAVAILABLE):
        retry = 1.0
    return retry
