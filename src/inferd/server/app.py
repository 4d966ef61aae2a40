"""The FastAPI app factory and its lifespan (background loading, drain, close)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from inferd import __version__
from inferd.config.server import ServerSettings
from inferd.engine.manager import ModelManager
from inferd.observability.metrics import Metrics
from inferd.server.errors import install_error_handlers
from inferd.server.middleware import BodyLimitMiddleware, RequestIdMiddleware
from inferd.server.observe import ObserveMiddleware
from inferd.server.routes import health, openai, tasks, v2
from inferd.server.routes import metrics as metrics_route

log = logging.getLogger(__name__)


def create_app(
    settings: ServerSettings, manager: ModelManager, metrics: Metrics | None = None
) -> FastAPI:
    """An app that serves `manager`'s models. Models load in the background once it starts."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.get_running_loop().create_task(manager.load_all(), name="inferd-load")
        app.state.loading = loading
        try:
            yield
        finally:
            if not loading.done():
                loading.cancel()
                await asyncio.gather(loading, return_exceptions=True)
            if manager.accepting:  # not drained by a signal (e.g. an embedding app)
                await manager.drain(settings.drain_timeout_s)
            await manager.close()
            log.info("models closed")

    app = FastAPI(
        title="inferd",
        version=__version__,
        description="Inference server for ONNX models (KServe V2).",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.manager = manager
    app.state.metrics = metrics
    if metrics is not None:
        metrics.attach(manager)
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(v2.router)
    app.include_router(tasks.router)
    app.include_router(openai.router)
    app.include_router(metrics_route.router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        ObserveMiddleware,
        metrics=metrics,
        sample_rate=settings.log_sample_rate,
        gpu_memory=metrics is not None and metrics.gpu_present,
    )
    app.add_middleware(RequestIdMiddleware)  # outermost: every response carries the id
    return app
