"""The FastAPI app factory and its lifespan (companions, background loading, drain, close)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from inferd import __version__
from inferd.config.server import ServerSettings
from inferd.engine import Engine
from inferd.front.keys import read_keys
from inferd.observability.live import LiveWindow
from inferd.observability.metrics import Metrics
from inferd.observability.observer import Observer
from inferd.server.auth import AuthMiddleware
from inferd.server.companion import Companion
from inferd.server.data_routes import DATA_ROUTES, TEXT_PATHS
from inferd.server.dataplane import DataPlane
from inferd.server.errors import ERROR_RESPONSES, OPENAI_ERROR_RESPONSES, install_error_handlers
from inferd.server.job_service import Jobs
from inferd.server.middleware import (
    BodyLimitMiddleware,
    CatchAllMiddleware,
    RequestIdMiddleware,
)
from inferd.server.observe import ObserveMiddleware
from inferd.server.openapi import install_openapi
from inferd.server.routes import health, openai, repository, status, v2
from inferd.server.routes import jobs as jobs_route
from inferd.server.routes import metrics as metrics_route

log = logging.getLogger(__name__)


async def _nothing() -> None:
    return None


def create_app(
    settings: ServerSettings,
    engine: Engine,
    metrics: Metrics | None = None,
    load: bool = True,
    live: LiveWindow | None = None,
    companions: Sequence[Companion] = (),
) -> FastAPI:
    """An app that serves `engine`'s models. Models load in the background once it starts
    (`load=False`: the caller loaded them before, e.g. a Ray Serve replica, which takes
    traffic only once loaded). `live`: the window of recent requests (a new one when not
    given; the caller's, when its companions record into it too). `companions`: services run
    beside the app (gRPC), started first and stopped after the drain and the jobs, before the
    engine closes."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for companion in companions:
            await companion.start()
        await jobs.start()
        loop = asyncio.get_running_loop()
        loading = loop.create_task(engine.load_all() if load else _nothing(), name="inferd-load")
        app.state.loading = loading
        try:
            yield
        finally:
            if not loading.done():
                loading.cancel()
                await asyncio.gather(loading, return_exceptions=True)
            if engine.accepting:  # not drained by a signal (e.g. an embedding app)
                await engine.drain(settings.drain_timeout_s)
            await jobs.stop()
            for companion in reversed(companions):
                await companion.stop()
            await engine.close()
            log.info("models closed")

    app = FastAPI(
        title="inferd",
        version=__version__,
        description="Inference server for ONNX models (KServe V2).",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.metrics = metrics
    live = live if live is not None else LiveWindow()
    app.state.live = live
    if metrics is not None:
        metrics.attach(engine)
    install_error_handlers(app)
    install_openapi(app, DATA_ROUTES)
    for module in (health, v2, openai, jobs_route, status, metrics_route, repository):
        shaped = module is openai  # OpenAI's error shape (under /v1)
        app.include_router(
            module.router, responses=OPENAI_ERROR_RESPONSES if shaped else ERROR_RESPONSES
        )
    routes = [row.route for row in DATA_ROUTES]
    # the same routes, last in the app's router, are never reached for a request they serve
    # (the data plane took it): there they give another method its 405 and a path with a
    # trailing slash its redirect, as Starlette's router does for every route
    app.router.routes.extend(routes)
    # added first, so innermost: every middleware below still applies to the data plane
    app.add_middleware(DataPlane, routes=routes, handlers=app.exception_handlers)
    api_keys = read_keys(settings.api_keys_file)
    jobs = Jobs(
        settings,
        engine,
        app,
        routes,
        app.exception_handlers,
        metrics or Observer(),
        live,
        owned=bool(api_keys),
    )
    app.state.jobs = jobs
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        text_max_bytes=settings.max_text_body_bytes,
        text_paths=TEXT_PATHS,
    )
    app.add_middleware(
        AuthMiddleware,
        api_keys=api_keys,
        admin_keys=read_keys(settings.admin_keys_file),
    )
    app.add_middleware(CatchAllMiddleware)  # inside observation: the 500 is recorded
    app.add_middleware(
        ObserveMiddleware,
        metrics=metrics,
        sample_rate=settings.log_sample_rate,
        gpu_memory=metrics is not None and metrics.gpu_present,
        live=live,
    )
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    if origins:  # off by default
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Retry-After"],
        )
    app.add_middleware(RequestIdMiddleware)  # outermost: every response carries the id
    return app
