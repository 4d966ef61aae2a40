"""Running the app under uvicorn with inferd's graceful drain on SIGTERM / SIGINT.

First signal: readiness turns false at once (liveness stays 200); after `drain_grace_s` new
inference requests get 5030; queued and running requests finish (up to `drain_timeout_s`); then
uvicorn stops, the lifespan closes the sessions, and the process exits 0. A second SIGINT forces
the exit.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType

import uvicorn

from inferd.config.server import ServerSettings
from inferd.engine import Engine
from inferd.observability.metrics import Metrics
from inferd.server.http_limits import bounded_protocol

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, engine: Engine, settings: ServerSettings):
        super().__init__(config)
        self._engine = engine
        self._settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two steps of the loop; never re-raised at exit, so a
        # drained server exits 0.
        if self._drain_task is not None or self._loop is None:
            if sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True
            return
        self._loop.call_soon_threadsafe(self._start_drain, sig)

    def _start_drain(self, sig: int) -> None:
        if self._drain_task is None:
            self._drain_task = asyncio.get_running_loop().create_task(self._drain(sig))

    async def _drain(self, sig: int) -> None:
        settings = self._settings
        self._engine.begin_drain()
        log.info(
            "drain started",
            extra={
                "signal": signal.Signals(sig).name,
                "grace_s": settings.drain_grace_s,
                "timeout_s": settings.drain_timeout_s,
                "in_flight": self._engine.in_flight,
            },
        )
        if settings.drain_grace_s > 0:
            await asyncio.sleep(settings.drain_grace_s)
        finished = await self._engine.drain(settings.drain_timeout_s)
        log.info(
            "drain finished", extra={"complete": finished, "in_flight": self._engine.in_flight}
        )
        self.should_exit = True


def run_server(
    settings: ServerSettings,
    engine: Engine,
    metrics: Metrics | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serves until drained; on `sock` when given (already bound), else on host:port."""
    from inferd.server.app import create_app

    app = create_app(settings, engine, metrics)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=settings.access_log,
        timeout_keep_alive=int(settings.keep_alive_s),
        http=bounded_protocol(
            settings.max_header_bytes, settings.max_headers, settings.header_timeout_s
        ),
        timeout_graceful_shutdown=int(settings.drain_timeout_s) + 1,
        lifespan="on",
    )
    DrainingServer(config, engine, settings).run(sockets=None if sock is None else [sock])
