"""The FastAPI app factory and its lifespan (companions, background loading, drain, close)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

from inferd import __version__
from inferd.config.server_settings import ServerSettings
from inferd.engine import Engine
from inferd.front.keys import Keys
from inferd.jobs.store import JobStore
from inferd.observability.live import LiveWindow
from inferd.observability.metrics import Metrics
from inferd.observability.observer import Observer
from inferd.server.auth import AuthMiddleware
from inferd.server.companion import Companion
from inferd.server.data_routes import DATA_ROUTES, TEXT_PATHS
from inferd.server.dataplane import DataPlane
from inferd.server.error_answers import (
    ERROR_RESPONSES,
    OPENAI_ERROR_RESPONSES,
    install_error_handlers,
)
from inferd.server.job_service import Jobs
from inferd.server.middleware import (
    BodyLimitMiddleware,
    CatchAllMiddleware,
    RequestIdMiddleware,
)
from inferd.server.observe import ObserveMiddleware
from inferd.server.openapi import install_openapi
from inferd.server.routes import jobs as jobs_route
from inferd.server.routes import openai, probes, repository, status, v2
from inferd.server.routes import prometheus as metrics_route

log = logging.getLogger(__name__)


async def _nothing() -> None:
    return None


def create_app(
    settings: ServerSettings,
    engine: Engine,
    keys: Keys,
    job_store: JobStore,
    metrics: Metrics | None = None,
    load: bool = True,
    live: LiveWindow | None = None,
    companions: Sequence[Companion] = (),
) -> FastAPI:
    """An app that serves `engine`'s models to the holders of `keys` (read by the composition
    root, inferd.composition), its jobs kept in `job_store`. Models load in the background
    once it starts (`load=False`: the caller loaded them before, e.g. a Ray Serve replica,
    which takes traffic only once loaded). `live`: the window of recent requests (a new one
    when not given; the caller's, when its companions record into it too). `companions`:
    services run beside the app (gRPC), started first and stopped after the drain and the
    jobs, before the engine closes."""
    app = FastAPI(
        title="inferd",
        version=__version__,
        description="Inference server for ONNX models (KServe V2).",
        lifespan=functools.partial(_lifespan, settings, engine, load, companions),
    )
    live = live if live is not None else LiveWindow()
    app.state.settings, app.state.engine, app.state.metrics = settings, engine, metrics
    app.state.live = live
    if metrics is not None:
        metrics.attach(engine)
    install_error_handlers(app)
    install_openapi(app, DATA_ROUTES)
    for module in (probes, v2, openai, jobs_route, status, metrics_route, repository):
        shaped = module is openai  # OpenAI's error shape (under /v1)
        app.include_router(
            module.router, responses=OPENAI_ERROR_RESPONSES if shaped else ERROR_RESPONSES
        )
    routes = [row.route for row in DATA_ROUTES]
    # the same routes, last in the app's router, are never reached for a request they serve
    # (the data plane took it): there they give another method its 405 and a path with a
    # trailing slash its redirect, as Starlette's router does for every route
    app.router.routes.extend(routes)
    handlers = app.exception_handlers
    observer = metrics or Observer()
    owned = bool(keys.api_keys)
    app.state.jobs = Jobs(settings, engine, app, routes, handlers, observer, live, job_store, owned)
    app.user_middleware = [*_middleware(settings, keys, metrics, live), _data_plane(app, routes)]
    return app


def _middleware(
    settings: ServerSettings, keys: Keys, metrics: Metrics | None, live: LiveWindow
) -> list[Middleware]:
    """Every request's way in, outermost first: each wraps every one below it."""
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    cors = Middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
        expose_headers=["X-Request-ID", "Retry-After"],
    )
    return [
        Middleware(RequestIdMiddleware),  # every response carries the id
        *([cors] if origins else []),  # off by default
        Middleware(
            ObserveMiddleware,
            metrics=metrics,
            sample_rate=settings.log_sample_rate,
            gpu_memory=metrics is not None and metrics.gpu_present,
            live=live,
        ),
        Middleware(CatchAllMiddleware),  # inside observation: the 500 is recorded
        Middleware(AuthMiddleware, keys=keys),
        Middleware(
            BodyLimitMiddleware,
            max_bytes=settings.max_body_bytes,
            text_max_bytes=settings.max_text_body_bytes,
            text_paths=TEXT_PATHS,
        ),
    ]


def _data_plane(app: FastAPI, routes: list[Route]) -> Middleware:
    """Innermost: the data routes, served past FastAPI, with every middleware above applied."""
    return Middleware(DataPlane, routes=routes, handlers=app.exception_handlers)


@asynccontextmanager
async def _lifespan(
    settings: ServerSettings,
    engine: Engine,
    load: bool,
    companions: Sequence[Companion],
    app: FastAPI,
) -> AsyncIterator[None]:
    jobs: Jobs = app.state.jobs
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
