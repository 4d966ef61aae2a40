"""Running the app under uvicorn with inferd's graceful drain on SIGTERM / SIGINT.

First signal: readiness turns false at once (liveness stays 200); after `drain_grace_s` new
inference requests get 5030; queued and running requests finish, within `drain_timeout_s` from
the signal (grace included); what is still in flight then is answered 5030; uvicorn gets
`DRAIN_MARGIN_S` to send the last answers, the lifespan closes the sessions, and the process
exits 0. The whole shutdown takes at most `drain_timeout_s` + `DRAIN_MARGIN_S` + the sessions'
close.

A second signal (SIGTERM or SIGINT) forces the exit: everything in flight is answered 5030
(streams end with an error event), and the process exits 1.

The "drain finished" log line counts what happened: the requests in flight at the signal and
after the grace, and `answered_5030`, those the drain's timeout or a second signal answered
5030 (`forced` says which); `complete` is true only when every one finished on its own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Sequence
from types import FrameType

import uvicorn

from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.front.keys import Keys
from inferd.jobs.store import JobStore
from inferd.observability.live import LiveWindow
from inferd.observability.metrics import Metrics
from inferd.server.companion import Companion
from inferd.server.http_limits import bounded_protocol
from inferd.server.shed import EarlyRefusal

log = logging.getLogger(__name__)


DRAIN_MARGIN_S = 1.0
"""After the drain, the time uvicorn gets to send the last answers and close connections."""
FORCED_FLUSH_S = 0.2
"""On a forced exit, the time the 5030 answers get to reach their clients."""
CUT_WAIT_S = 0.5
"""After a drain ran out of time and what was in flight was answered 5030: the most it waits
for those answers to go out (they are counted as they do), before the drain's line."""


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        engine: Engine,
        settings: ServerSettings,
        companions: Sequence[Companion] = (),
    ):
        super().__init__(config)
        self._companions = companions
        """The services the app runs beside HTTP (their addresses are known once it started)."""
        self._engine = engine
        self._settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._force_task: asyncio.Task[None] | None = None
        self.forced = False
        """A second signal forced the exit (the process then exits non-zero)."""
        """Requests in flight when the engine was aborted (by the drain's timeout or a second
        signal): each of them is answered 5030 by the abort."""

    async def serve(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)  # type: ignore[arg-type]

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._log_listening()

    def _log_listening(self) -> None:
        """One line with where every protocol listens, its real port (`--port 0` picks one):
        the HTTP URL and each companion's (gRPC's), or that it is off."""
        bound = self.servers[0].sockets[0].getsockname() if self.servers else None
        if bound is None:
            return
        host = self._settings.host
        shown = f"[{host}]" if ":" in host else host
        http_url = f"http://{shown}:{bound[1]}"
        line = f"listening on {http_url} (HTTP)"
        urls: dict[str, str | None] = {"http_url": http_url}
        for companion in self._companions:
            url = companion.url
            line += f" and {url} ({companion.name})" if url else f"; {companion.name} off"
            urls[f"{companion.name.lower()}_url"] = url
        log.info(line, extra=urls)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two steps of the loop; never re-raised at exit, so a
        # drained server exits 0.
        if self._loop is None:  # not serving yet
            self.force_exit = self.should_exit = True
            return
        if self._drain_task is not None:
            self._loop.call_soon_threadsafe(self._start_force, sig)
            return
        self._loop.call_soon_threadsafe(self._start_drain, sig)

    def _start_drain(self, sig: int) -> None:
        if self._drain_task is None:
            self._drain_task = asyncio.get_running_loop().create_task(self._drain(sig))

    async def _abort(self) -> None:
        """Answers everything in flight 5030 (the requests it cut are counted as their
        answers go out: `Engine.answered_cut`)."""
        await self._engine.abort()

    def _start_force(self, sig: int) -> None:
        if self._force_task is None:
            self._force_task = asyncio.get_running_loop().create_task(self._force(sig))

    async def _force(self, sig: int) -> None:
        log.warning(
            "forced exit: answering what is in flight with 5030",
            extra={"signal": signal.Signals(sig).name, "in_flight": self._engine.in_flight},
        )
        self.forced = True
        await self._abort()
        await asyncio.sleep(FORCED_FLUSH_S)
        self.force_exit = self.should_exit = True

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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.drain_timeout_s
        at_signal = self._engine.in_flight
        if settings.drain_grace_s > 0:
            await asyncio.sleep(min(settings.drain_grace_s, settings.drain_timeout_s))
        admitted = self._engine.in_flight  # the grace's admissions among them
        finished = await self._engine.drain(max(0.0, deadline - loop.time()))
        if not finished:  # out of time: what is left is answered now, not cut off
            await self._abort()
            await self._engine.drain(CUT_WAIT_S)  # (their answers out, and counted)
        log.info(
            "drain finished",
            extra={
                "complete": finished and not self.forced,
                "forced": self.forced,
                "in_flight_at_signal": at_signal,
                "in_flight_after_grace": admitted,
                "answered_5030": self._engine.answered_cut,
                "seconds": round(settings.drain_timeout_s - (deadline - loop.time()), 3),
            },
        )
        self.config.timeout_graceful_shutdown = DRAIN_MARGIN_S  # type: ignore[assignment]
        self.should_exit = True


def run_server(
    settings: ServerSettings,
    engine: Engine,
    keys: Keys,
    job_store: JobStore,
    metrics: Metrics | None = None,
    sock: socket.socket | None = None,
    live: LiveWindow | None = None,
    companions: Sequence[Companion] = (),
) -> bool:
    """Serves until drained; on `sock` when given (already bound), else on host:port, with
    `companions` beside the app (inferd.server.app's `create_app`). True when the drain ran
    its course, False when a second signal forced the exit."""
    from inferd.server.app import create_app
    from inferd.server.data_routes import DATA_ROUTES

    app = create_app(settings, engine, keys, job_store, metrics, live=live, companions=companions)
    early = EarlyRefusal(engine, DATA_ROUTES, metrics, keys)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=settings.access_log,
        timeout_keep_alive=int(settings.keep_alive_s),
        http=bounded_protocol(
            settings.max_header_bytes,
            settings.max_headers,
            settings.header_timeout_s,
            early.answer,
            settings.body_timeout_s,
        ),
        timeout_graceful_shutdown=int(settings.drain_timeout_s) + 1,
        lifespan="on",
    )
    server = DrainingServer(config, engine, settings, companions)
    server.run(sockets=None if sock is None else [sock])
    return not server.forced
