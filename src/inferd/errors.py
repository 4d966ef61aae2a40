"""The one error tree of inferd, with its stable codes (docs/errors.md lists them).

Knows nothing of HTTP or gRPC: `server/` maps a code to a status. Imports nothing of inferd.
Errors from other libraries are translated into these at one boundary and raised `from` them.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    EMPTY_INPUT = 4001
    INPUT_TOO_LONG = 4002
    ENCODING = 4003
    INVALID_INPUT = 4004
    TOO_MANY_ITEMS = 4005
    INVALID_GRAMMAR = 4006
    UNAUTHORIZED = 4010
    FORBIDDEN = 4030
    NOT_FOUND = 4040
    QUEUE_FULL = 4290
    TOO_MANY_LOADS = 4291
    UNAVAILABLE = 5030
    DEADLINE_EXCEEDED = 5040
    OUT_OF_MEMORY = 5070
    MODEL_TOO_LARGE = 5071
    INTERNAL = 5000


class InferdError(Exception):
    """Base of every error a client can see. `message` is safe to show to a client."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s
        self.param = param
        """The request field the error is about, when it is one (OpenAI's `param`)."""


class EmptyInputError(InferdError):
    code = ErrorCode.EMPTY_INPUT


class InputTooLongError(InferdError):
    code = ErrorCode.INPUT_TOO_LONG


class EncodingError(InferdError):
    code = ErrorCode.ENCODING


class InvalidInputError(InferdError):
    code = ErrorCode.INVALID_INPUT


class TooManyItemsError(InferdError):
    code = ErrorCode.TOO_MANY_ITEMS


class InvalidGrammarError(InferdError):
    """A constraint on the answer (a JSON schema, a regex, a choice list, a tool's parameters)
    that is invalid, unsupported, or too large or slow to compile."""

    code = ErrorCode.INVALID_GRAMMAR


class UnauthorizedError(InferdError):
    """No key, or a key that is not one of the server's."""

    code = ErrorCode.UNAUTHORIZED


class ForbiddenError(InferdError):
    code = ErrorCode.FORBIDDEN


class NotFoundError(InferdError):
    code = ErrorCode.NOT_FOUND


class QueueFullError(InferdError):
    code = ErrorCode.QUEUE_FULL


class DeadlineUnmetError(QueueFullError):
    """Queued work the request's deadline leaves no time for: shed as a full queue (4290);
    a protocol whose deadlines are the client's (gRPC) answers it as a deadline passed."""


class TooManyLoadsError(InferdError):
    """The client caused as many on-demand model loads as its limit allows for now."""

    code = ErrorCode.TOO_MANY_LOADS


class UnavailableError(InferdError):
    """Not ready, draining, or shut down."""

    code = ErrorCode.UNAVAILABLE


class DeadlineExceededError(InferdError):
    code = ErrorCode.DEADLINE_EXCEEDED


class OutOfMemoryError(InferdError):
    code = ErrorCode.OUT_OF_MEMORY


class ModelTooLargeError(InferdError):
    """An on-demand model that can never load under the configured memory budget."""

    code = ErrorCode.MODEL_TOO_LARGE


class InternalError(InferdError):
    code = ErrorCode.INTERNAL


class ConfigError(Exception):
    """A configuration file, variable or flag is wrong. Raised at start-up, never to a client."""


def error_body(code: int, message: str, request_id: str | None = None) -> dict[str, object]:
    """inferd's own error body, whatever answers it (a route, the HTTP protocol before the app,
    a job): `{"error": message, "code": code}`, with the `request_id` when it answers a request.
    (The OpenAI routes wrap the same fields in OpenAI's shape: inferd.server.error_answers.)"""
    body: dict[str, object] = {"error": message, "code": int(code)}
    if request_id is not None:
        body["request_id"] = request_id
    return body
