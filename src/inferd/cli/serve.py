"""`inferd serve`: settings in, a running server out. The composition root of a server: the
engine with ONNX Runtime as its runtime, the HTTP app, and gRPC beside it."""

from __future__ import annotations

import os
import socket
import sys

from inferd.composition import build_engine, open_jobs, read_access
from inferd.config.server_settings import ServerSettings
from inferd.engine.versions.version_loader import RuntimeLoader
from inferd.grpc_v2.grpc_server import GrpcServer
from inferd.observability.live import LiveWindow
from inferd.observability.logs import configure_logging
from inferd.runtime.onnx_session import OnnxSession
from inferd.server.runner import run_server


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else starts, so a port in use is one line
    at once rather than an error after start-up; uvicorn then serves on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=2048)


def serve(settings: ServerSettings, runtime: RuntimeLoader = OnnxSession) -> int:
    """`runtime` opens each model instance: ONNX Runtime; another only where a benchmark
    stands a device of known speed in for it (benchmarks/lib/emulated_device.py)."""
    try:
        sock = listening_socket(settings.host, settings.port)
    except OSError as exc:
        return _cannot_listen(settings.host, settings.port, exc, "--port")
    if settings.grpc_port:
        try:  # the gRPC server binds it once the app starts: a busy port is said now
            listening_socket(settings.host, settings.grpc_port).close()
        except OSError as exc:
            sock.close()
            return _cannot_listen(settings.host, settings.grpc_port, exc, "--grpc-port")
    try:
        return _serve_on(settings, sock, runtime)
    finally:
        sock.close()


def _cannot_listen(host: str, port: int, exc: OSError, flag: str) -> int:
    reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    print(
        f"inferd: cannot listen on {host}:{port}: {reason} "
        f"(another server there? {flag} chooses another)",
        file=sys.stderr,
    )
    return 3


def _serve_on(settings: ServerSettings, sock: socket.socket, runtime: RuntimeLoader) -> int:
    configure_logging(settings.log_level, settings.log_format)
    sys.setswitchinterval(settings.gil_switch_interval_ms / 1000.0)
    engine, metrics = build_engine(settings, runtime)
    keys = read_access(settings)
    live = LiveWindow()  # HTTP's requests and gRPC's calls, in one window
    grpc = GrpcServer(settings, engine, keys, metrics, live)  # off when grpc_port is 0
    jobs = open_jobs(settings, metrics)
    drained = run_server(settings, engine, keys, jobs, metrics, sock, live, (grpc,))
    return 0 if drained else 1  # 1: a second signal forced the exit
