"""A Ray Serve replica that is an inferd server: its own engine, batchers and runtimes, and
inferd's whole HTTP app as the replica's ingress (`serve.ingress`, built in the replica),
reached through HAProxy (Serve's direct ingress) or Serve's proxy.

The replica loads every model before it reports itself started, so Serve routes nothing to
it while it loads; Serve's health checks ask inferd's readiness; the replica reports its
queue depth for the autoscaling policy (inferd.rayserve.autoscaling); when Serve stops it, the
app's lifespan drains it as SIGTERM drains `inferd serve`. With `multiplex`, Serve routes a
request that names its model (the `serve_multiplexed_model_id` header) to a replica that holds
that model (inferd.rayserve.multiplex).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import FastAPI
from ray import serve

from inferd.compat.ray_internals import haproxy_ingress
from inferd.composition import build_engine, open_jobs, read_access
from inferd.config.server_settings import ServerSettings
from inferd.observability.logs import configure_logging
from inferd.rayserve.autoscaling import QUEUE_METRIC
from inferd.rayserve.multiplex import ModelAffinity, ModelIds
from inferd.server.app import create_app

log = logging.getLogger(__name__)


@serve.ingress()
class InferdReplica:
    async def __init__(self, settings: dict[str, Any], multiplex: bool = False) -> None:  # type: ignore[misc]  # Serve awaits it
        """`settings`: inferd's server settings (ServerSettings fields) for this replica;
        `multiplex`: Serve's multiplexed model ids are the models this replica holds."""
        # gRPC off: replicas on one node cannot share its port (docs/ray.md)
        self._settings = ServerSettings.model_validate({**settings, "grpc_port": 0})
        configure_logging(self._settings.log_level, self._settings.log_format)
        self._engine, self._metrics = build_engine(self._settings)
        await self._engine.load_all()
        readiness = self._engine.readiness(self._settings.strict_readiness)
        if not readiness.ready:
            # Serve reports the failed start with this message and tries another replica
            await self._engine.close()
            raise RuntimeError(f"inferd replica not ready: {readiness.reason}")
        self._model_ids: ModelIds | None = None
        self._following: asyncio.Task[None] | None = None
        if multiplex:
            self._model_ids = ModelIds(self._engine)
            self._following = asyncio.get_running_loop().create_task(self._model_ids.run())
            if haproxy_ingress():
                log.warning(
                    "routing by model: this cluster's HTTP ingress is HAProxy (Serve's direct "
                    "ingress), which does not read serve_multiplexed_model_id; requests reach "
                    "replicas whatever models they hold (docs/ray.md)"
                )

    def __serve_build_asgi_app__(self) -> FastAPI:
        settings, metrics = self._settings, self._metrics
        keys, jobs = read_access(settings), open_jobs(settings, metrics)
        app = create_app(settings, self._engine, keys, jobs, metrics, load=False)
        if self._model_ids is not None:
            app.add_middleware(ModelAffinity, ids=self._model_ids)
        return app

    def check_health(self) -> None:
        """Serve's health check: inferd's readiness (a failure restarts the replica)."""
        if not self._engine.accepting:
            return  # draining: being stopped on purpose
        readiness = self._engine.readiness(self._settings.strict_readiness)
        if not readiness.ready:
            raise RuntimeError(f"inferd replica not ready: {readiness.reason}")

    def record_autoscaling_stats(self) -> dict[str, float]:
        queued = sum(items for _, _, items in self._engine.queue_depths())
        return {QUEUE_METRIC: float(queued), "inferd_in_flight": float(self._engine.in_flight)}
