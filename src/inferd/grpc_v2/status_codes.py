"""inferd's error codes as gRPC status codes: the one table (docs/grpc.md shows it).

Every refusal keeps its inferd code and message in the status details (`[4290] ...`) and in
the trailing metadata (`inferd-code`, and `retry-after` in seconds where HTTP would send it),
so a gRPC client can tell a full queue from a model without memory."""

from __future__ import annotations

import grpc

from inferd.errors import ErrorCode

GRPC_STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.EMPTY_INPUT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INPUT_TOO_LONG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.ENCODING: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_INPUT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.TOO_MANY_ITEMS: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_GRAMMAR: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.UNAUTHORIZED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.QUEUE_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.TOO_MANY_LOADS: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.OUT_OF_MEMORY: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.MODEL_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}
