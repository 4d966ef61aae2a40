"""`inferd ray serve`: a repository deployed on a Ray cluster with Ray Serve (the `ray`
extra). Every server flag applies to each replica; `--host`/`--port` are where the cluster
takes HTTP requests.

On a cluster started with Serve's direct ingress and HAProxy (DIRECT_INGRESS_ENV; a local
cluster started by this command has them), requests go from HAProxy straight to each
replica's own HTTP server; otherwise through Serve's Python proxy, which costs a third of a
replica's throughput on a small model (benchmarks/RESULTS.md, "Ray Serve").
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from inferd.config.server import ServerSettings, load_server_settings

DIRECT_INGRESS_ENV = {
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
}
"""Set in the environment of `ray start` (every node) for Serve's direct ingress: HAProxy on
the HTTP port, routing to the replicas' own servers."""


def add_ray_command(commands: Any, add_settings_flags: Callable[[Any], None]) -> None:
    ray = commands.add_parser("ray", help="deploy on a Ray cluster with Ray Serve")
    ray_commands = ray.add_subparsers(dest="ray_command", metavar="RAY_COMMAND")
    serve = ray_commands.add_parser(
        "serve", help="serve a repository with replicas that Ray places, routes to and scales"
    )
    serve.add_argument("--replicas", type=int, default=1, help="a fixed number of replicas")
    serve.add_argument(
        "--autoscale",
        default=None,
        metavar="MIN,MAX",
        help="scale between MIN and MAX replicas on inferd's queue depth",
    )
    serve.add_argument(
        "--queue-target",
        type=float,
        default=3.0,
        help="autoscaling: items waiting per replica (docs/capacity.md; default 3)",
    )
    serve.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica")
    serve.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per replica")
    serve.add_argument(
        "--max-ongoing", type=int, default=64, help="requests a replica takes at once"
    )
    serve.add_argument(
        "--address",
        default=None,
        help="the Ray cluster (host:port of its head); default: start a local one",
    )
    add_settings_flags(serve)


def run_ray_command(args: Any) -> int:
    if args.ray_command != "serve":
        print("inferd ray: give a command (serve)", file=sys.stderr)
        return 2
    flags = {name: getattr(args, name) for name in ServerSettings.model_fields}
    settings = load_server_settings(None, os.environ, flags)
    autoscale = None
    if args.autoscale:
        low, _, high = args.autoscale.partition(",")
        try:
            autoscale = (int(low), int(high))
        except ValueError:
            print("inferd ray serve: --autoscale takes MIN,MAX (e.g. 1,4)", file=sys.stderr)
            return 2
    try:
        import ray
        from ray import serve

        from inferd.rayserve.deploy import APP_NAME, RayDeployment, deploy
    except ImportError as exc:
        needed = f"inferd ray: needs the ray extra: pip install 'inferd[ray]' ({exc})"
        print(needed, file=sys.stderr)
        return 2
    deployment = RayDeployment(
        settings,
        replicas=args.replicas,
        autoscale=autoscale,
        queue_target=args.queue_target,
        num_cpus=args.num_cpus,
        num_gpus=args.num_gpus,
        max_ongoing_requests=args.max_ongoing,
    )
    try:
        deployment.options()
    except ValueError as exc:
        print(f"inferd ray serve: {exc}", file=sys.stderr)
        return 2
    if args.address is None:
        os.environ.update(DIRECT_INGRESS_ENV)  # the local cluster's controller inherits them
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address=args.address, logging_level=logging.WARNING, log_to_driver=False)
    stop = {"signal": 0}
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
        deploy(deployment)
        print(
            f"inferd on Ray Serve: http://{settings.host}:{settings.port} "
            f"({'autoscaling ' + args.autoscale if autoscale else f'{args.replicas} replicas'})",
            flush=True,
        )

        def stopping(signum: int, frame: object) -> None:
            stop["signal"] = signum

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        while not stop["signal"]:
            signal.pause()
        print("inferd on Ray Serve: draining the replicas", flush=True)
        serve.delete(APP_NAME)  # each replica's lifespan drains it
    finally:
        ray.shutdown()
    return 0
