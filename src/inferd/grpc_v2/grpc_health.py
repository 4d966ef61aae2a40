"""`grpc.health.v1.Health` from inferd's own readiness: SERVING when the server is ready (the
same answer as `/v2/health/ready`), NOT_SERVING while it loads, drains or has a failed model.
The service may name a model (`"minilm"`: that model's readiness) or the inference service
(`"inference.GRPCInferenceService"`, or `""`: the server's); another name is NOT_FOUND."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferd.engine import Engine
from inferd.errors import InferdError

Status = health_pb2.HealthCheckResponse.ServingStatus
WATCH_EVERY_S = 0.5
SERVER_NAMES = frozenset({"", "inference.GRPCInferenceService"})


class Health(health_pb2_grpc.HealthServicer):  # type: ignore[misc]  # (generated, untyped)
    def __init__(self, engine: Engine, strict_readiness: bool) -> None:
        self._engine = engine
        self._strict = strict_readiness

    def _status(self, service: str) -> int | None:
        """The service's status; None for a name that is neither the server nor a model."""
        if service in SERVER_NAMES:
            ready = self._engine.readiness(self._strict).ready
        else:
            try:
                served = self._engine.registry.resolve(service)
                ready = served.ready or served.standby
            except InferdError:
                return None
        return int(Status.SERVING if ready else Status.NOT_SERVING)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        status = self._status(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service '{request.service}'")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        """The status now, then each change (read every `WATCH_EVERY_S`), until the client
        leaves; an unknown name is SERVICE_UNKNOWN until it is known."""
        last = None
        while True:
            status = self._status(request.service)
            status = Status.SERVICE_UNKNOWN if status is None else status
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)
            await asyncio.sleep(WATCH_EVERY_S)
