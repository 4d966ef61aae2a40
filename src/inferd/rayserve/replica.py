"""A Ray Serve replica that is an inferd server: its own engine, batchers and runtimes, and
inferd's whole HTTP app as the replica's ingress (`serve.ingress`, built in the replica),
reached through HAProxy (Serve's direct ingress) or Serve's proxy.

The replica loads every model before it reports itself started, so Serve routes nothing to
it while it loads; Serve's health checks ask inferd's readiness; the replica reports its
queue depth for the autoscaling policy (inferd.rayserve.policy); when Serve stops it, the
app's lifespan drains it as SIGTERM drains `inferd serve`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from ray import serve

from inferd.cli.serve import build_engine
from inferd.config.server import ServerSettings
from inferd.observability.logs import configure_logging
from inferd.rayserve.policy import QUEUE_METRIC
from inferd.server.app import create_app


@serve.ingress()
class InferdReplica:
    async def __init__(self, settings: dict[str, Any]) -> None:  # type: ignore[misc]  # Serve awaits it
        """`settings`: inferd's server settings (ServerSettings fields) for this replica."""
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

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self._settings, self._engine, self._metrics, load=False)

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
