"""The gRPC server: `inference.GRPCInferenceService` and `grpc.health.v1.Health` on
`grpc_port`, served by `grpc.aio` on an event loop and thread of its own (inferd.grpc_v2.loops:
there gRPC receives each message as bytes, which holds the interpreter, without holding the
HTTP server's loop), each call's behaviour run on the HTTP server's loop (so both protocols
share the engine, its batchers and its admission). The composition root (inferd.cli.serve)
hands it to the app as a companion: the app's lifespan starts it and stops it after a drain
(SIGTERM), when calls still running get `STOP_GRACE_S` to finish."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
from grpc_health.v1 import health_pb2_grpc

from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.front.keys import Keys
from inferd.front.recording import RequestRecorder
from inferd.grpc_v2 import kserve_v2_service_pb2_grpc as pb_grpc
from inferd.grpc_v2.gate import Gate, gated_handlers
from inferd.grpc_v2.grpc_health import Health
from inferd.grpc_v2.loops import LoopThread, on_app_loop, run_on
from inferd.grpc_v2.reader import Reader
from inferd.grpc_v2.service import InferenceService
from inferd.grpc_v2.wire import serialize_infer_response
from inferd.observability.live import LiveWindow
from inferd.observability.metrics import Metrics

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0


def grpc_address(settings: ServerSettings) -> str:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"{host}:{settings.grpc_port}"


class GrpcServer:
    """The gRPC server as a companion of the HTTP app (inferd.server.companion): it listens
    once the app starts and stops after the drain; off when `grpc_port` is 0."""

    name = "gRPC"

    def __init__(
        self,
        settings: ServerSettings,
        engine: Engine,
        keys: Keys,
        metrics: Metrics | None,
        live: LiveWindow | None = None,
    ) -> None:
        """`keys`: the server's API and admin keys; `live`: the app's window of recent
        requests, which gRPC's calls join."""
        self._settings = settings
        self._engine = engine
        self._keys = keys
        self._metrics = metrics
        self._live = live
        self._running: tuple[grpc.aio.Server, Reader, LoopThread] | None = None
        self._target: str | None = None
        """host:port where it listens (the port it bound), what a gRPC client is given."""

    @property
    def url(self) -> str | None:
        return f"grpc://{self._target}" if self._target is not None else None

    async def start(self) -> None:
        """Raises OSError when the port cannot be bound (another server holds it: gRPC's port
        reuse is off, so that is an error)."""
        settings, metrics = self._settings, self._metrics
        if settings.grpc_port == 0:
            return
        limit = settings.max_body_bytes
        pending = settings.grpc_max_pending_calls
        options = [
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            # calls gRPC's core holds until the server takes them: past its own soft bound
            # (1,000) it refuses a growing share of new calls without a word; the server
            # takes calls as fast as they come and answers those over grpc_max_calls itself
            ("grpc.server.max_pending_requests", pending),
            ("grpc.server.max_pending_requests_hard_limit", pending),
        ]
        recorder = RequestRecorder(
            metrics,
            settings.log_sample_rate,
            metrics is not None and metrics.gpu_present,
            self._live,
        )
        reader = Reader(settings.grpc_max_message_fields)
        service = InferenceService(
            self._engine, recorder, settings.strict_readiness, reader, settings.grpc_stream_window
        )
        gate = Gate(self._keys, settings.grpc_max_calls, metrics)
        health = _Handlers()
        health_pb2_grpc.add_HealthServicer_to_server(
            Health(self._engine, settings.strict_readiness), health
        )
        app = asyncio.get_running_loop()
        services = {
            name: {method: on_app_loop(handler, app) for method, handler in handlers.items()}
            for name, handlers in (
                inference_handlers(service, gate, reader),
                (health.service, health.handlers),
            )
        }
        address = grpc_address(settings)
        thread = LoopThread("inferd-grpc")
        loop = thread.start()
        try:
            server, port = await run_on(loop, _listen(options, services, address))
        except BaseException:
            reader.close()
            await thread.stop()
            raise
        self._running = server, reader, thread
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        self._target = f"{host}:{port}"

    async def stop(self) -> None:
        if self._running is not None:
            server, reader, thread = self._running
            self._running = None
            try:
                if thread.loop is not None:
                    await run_on(thread.loop, server.stop(STOP_GRACE_S))
            finally:
                await thread.stop()
                reader.close()


async def _listen(
    options: list[tuple[str, Any]],
    services: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]],
    address: str,
) -> tuple[grpc.aio.Server, int]:
    """(On gRPC's loop.) A server of `services` listening on `address`, and its port."""
    server = grpc.aio.server(options=options)
    for name, handlers in services.items():
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
        server.add_registered_method_handlers(name, handlers)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"cannot listen for gRPC on {address}: {exc}") from exc
    await server.start()
    return server, port


def inference_handlers(
    service: InferenceService, gate: Gate, reader: Reader
) -> tuple[str, dict[str, grpc.RpcMethodHandler[Any, Any]]]:
    """The generated registration's service name and handlers, every method behind the gate
    (inferd.grpc_v2.gate), with ModelInfer's response written by `wire` (no copies of
    tensors)."""
    collected = _Handlers()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(  # type: ignore[no-untyped-call]
        service, collected
    )
    handlers = gated_handlers(
        service,
        collected.handlers,
        gate,
        reader,
        service.calls.refuse,
        {"ModelInfer": serialize_infer_response},
    )
    return collected.service, handlers


class _Handlers:
    """Stands for the server while the generated code registers the service: keeps what it
    registers."""

    service = ""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass  # (the same handlers come to `add_registered_method_handlers`)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.service = service
        self.handlers = handlers
