"""Deploying a repository on a Ray cluster with Ray Serve: the Python API behind
`inferd ray serve`.

    from inferd.config.server_settings import ServerSettings
    from inferd.rayserve.deploy import RayDeployment, deploy

    deploy(RayDeployment(ServerSettings(repository=Path("models")), autoscale=(1, 4)))

Ray places the replicas (each an inferd engine, inferd.rayserve.replica) on the cluster's
nodes, routes requests to them (by the model each holds, with `multiplex`), restarts the ones
that fail its health checks (inferd's readiness), and scales them on inferd's queue depth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from ray import serve
from ray.serve.handle import DeploymentHandle

from inferd.config.server_settings import ServerSettings
from inferd.rayserve.autoscaling import QueueDepthPolicy

APP_NAME = "inferd"
POLICY = f"{QueueDepthPolicy.__module__}:{QueueDepthPolicy.__qualname__}"


@dataclass(frozen=True)
class RayDeployment:
    settings: ServerSettings
    """Each replica's server settings (its repository must be readable on every node)."""
    replicas: int = 1
    """A fixed number of replicas, when `autoscale` is not given."""
    autoscale: tuple[int, int] | None = None
    """(min, max) replicas, scaled on inferd's queue depth."""
    queue_target: float = 3.0
    """Autoscaling: items waiting per replica (docs/capacity.md)."""
    num_cpus: float = 1.0
    """CPUs Ray reserves for each replica."""
    num_gpus: float = 0.0
    max_ongoing_requests: int = 64
    """Requests Serve sends a replica at once (inferd batches them); more wait at the proxy."""
    upscale_delay_s: float = 5.0
    downscale_delay_s: float = 120.0
    multiplex: bool = False
    """Serve routes a request naming its model (the `serve_multiplexed_model_id` header) to a
    replica that holds it (inferd.rayserve.multiplex): through Serve's proxy, not HAProxy."""

    def options(self) -> dict[str, Any]:
        """The Serve deployment options."""
        drain_s = self.settings.drain_timeout_s
        options: dict[str, Any] = {
            "name": APP_NAME,
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
            "max_ongoing_requests": self.max_ongoing_requests,
            "health_check_period_s": 5.0,
            "health_check_timeout_s": 10.0,
            # the lifespan's drain runs within it
            "graceful_shutdown_timeout_s": drain_s + 5.0,
            "graceful_shutdown_wait_loop_s": 1.0,
            # inferd logs its own requests (sampled, with its stages); Serve's line per request
            # costs as much as a small model's run
            "logging_config": {"enable_access_log": False},
        }
        if self.autoscale is None:
            if self.replicas < 1:
                raise ValueError("replicas must be 1 or more")
            options["num_replicas"] = self.replicas
            return options
        low, high = self.autoscale
        if not 0 < low <= high:
            raise ValueError("autoscale needs 0 < min <= max")
        options["autoscaling_config"] = {
            "min_replicas": low,
            "max_replicas": high,
            "upscale_delay_s": self.upscale_delay_s,
            "downscale_delay_s": self.downscale_delay_s,
            "look_back_period_s": 15.0,
            "policy": {"policy_function": POLICY, "policy_kwargs": {"target": self.queue_target}},
        }
        return options

    def replica_settings(self) -> dict[str, Any]:
        return self.settings.model_dump(mode="json")


def application(deployment: RayDeployment) -> Any:
    """The Serve application (bound, not yet run)."""
    from inferd.rayserve.replica import InferdReplica

    make: Any = serve.deployment  # (typed for its use as a decorator)
    served = make(InferdReplica).options(**deployment.options())
    return served.bind(deployment.replica_settings(), deployment.multiplex)


def deploy(deployment: RayDeployment, route_prefix: str = "/") -> DeploymentHandle[Any]:
    """Runs the application on the connected Ray cluster (ray.init first; Serve starts if it
    has not) and returns once every replica is started, i.e. loaded and ready."""
    return serve.run(application(deployment), name=APP_NAME, route_prefix=route_prefix)


def wait_routed(host: str, port: int, route_prefix: str = "/", timeout_s: float = 60.0) -> None:
    """Returns once Serve's proxy on host:port routes `route_prefix` to the application.

    `serve.run` returns when the replicas are ready; the proxy learns the route a moment
    later, and until then answers 404 for every path. Raises TimeoutError if it never does."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    url = f"http://{host}:{port}/-/routes"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            routes = httpx.get(url, timeout=5.0).json()
            if isinstance(routes, dict) and routes.get(route_prefix) == APP_NAME:
                return
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"Serve's proxy at {url} did not route {route_prefix} in {timeout_s:.0f} s"
            )
        time.sleep(0.1)
