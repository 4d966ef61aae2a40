"""`inferd ray serve`: a repository deployed on a Ray cluster with Ray Serve (the `ray`
extra). Every server flag applies to each replica; `--host`/`--port` are where the cluster
takes HTTP requests.

On a cluster started with Serve's direct ingress and HAProxy (DIRECT_INGRESS_ENV; a local
cluster started by this command has them), requests go from HAProxy straight to each
replica's own HTTP server; otherwise through Serve's Python proxy, which costs a third of a
replica's throughput on a small model (benchmarks/RESULTS.md, "Ray Serve"). With
`--multiplex` requests that name their model go to a replica that holds it, which takes Serve's
proxy: HAProxy does not route by model (a local cluster of its own then has no HAProxy).

Without `--address` it starts a local cluster of its own (`local_cluster_env`): on loopback
(its HTTP port aside),
with token authentication and a token made up for it (held in its processes' environment,
never written to the home directory), and a short draining period for its replicas (Serve's
own HAProxy is the only balancer in front), so that SIGTERM stops it in seconds.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

from inferd.config.server_settings import ServerSettings, load_server_settings
from inferd.rayserve.environment import AUTH_ENV, DIRECT_INGRESS_ENV

DRAINING_PERIOD_ENV = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"
LOCAL_DRAINING_PERIOD_S = 2.0
"""How long a stopping replica of a local cluster stays reachable before it drains. Serve's
default (30 s) leaves an outside load balancer time to take it out, and made every stop of
`inferd ray serve` last 30 s or more; in front of a local cluster there is only Serve's own
HAProxy, which the controller updates as it stops a replica."""
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""A node that takes the loopback address as its own (Ray's switch for machines where a
cluster stays on one host; on Linux a node otherwise takes the address of the interface
that routes outside, even when given `--node-ip-address 127.0.0.1`). Read when `ray` is
imported; a node with it cannot join another's cluster (`ray start --address`)."""


def local_cluster_env(environ: Mapping[str, str], multiplex: bool = False) -> dict[str, str]:
    """What the environment of a local cluster's processes gets (`environ`: the current one).

    Ingress: Serve's direct ingress and HAProxy, but with `multiplex` (routing by model), which
    needs Serve's proxy: HAProxy does not read the model's header (docs/ray.md).

    Authentication: Ray 2.60 turns on token authentication for a new local cluster and writes
    its token to `~/.ray/auth_token`, where every later `ray start` of the user finds it and
    turns token authentication on for clusters that did not ask for it. This cluster has
    token authentication too, with a token of its own in its processes' environment
    (`RAY_AUTH_TOKEN`), written nowhere, ending with it; a choice made in the environment
    (`RAY_AUTH_MODE`, `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`) is kept as it is."""
    ingress = {} if multiplex else DIRECT_INGRESS_ENV
    env = {**ingress, **LOOPBACK_ENV, "RAY_USAGE_STATS_ENABLED": "0"}
    env[DRAINING_PERIOD_ENV] = str(LOCAL_DRAINING_PERIOD_S)
    env = {name: environ.get(name, value) for name, value in env.items()}
    if not any(name in environ for name in AUTH_ENV):
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    return env


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
        "--multiplex",
        action="store_true",
        help="route each request that names its model (header serve_multiplexed_model_id) to "
        "a replica that holds it (Ray Serve's model multiplexing; through Serve's proxy)",
    )
    serve.add_argument(
        "--address",
        default=None,
        help="the Ray cluster (host:port of its head); default: start a local one",
    )
    add_settings_flags(serve)


def _until_stopped() -> None:
    """Waits for SIGTERM or SIGINT."""
    stop = {"signal": 0}

    def stopping(signum: int, frame: object) -> None:
        stop["signal"] = signum

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    while not stop["signal"]:
        signal.pause()


def _autoscale(text: str | None) -> tuple[int, int] | None:
    """`--autoscale MIN,MAX` read (ValueError when it is not two whole numbers)."""
    if not text:
        return None
    low, _, high = text.partition(",")
    return int(low), int(high)


def run_ray_command(args: Any) -> int:
    if args.ray_command != "serve":
        print("inferd ray: give a command (serve)", file=sys.stderr)
        return 2
    flags = {name: getattr(args, name) for name in ServerSettings.model_fields}
    settings = load_server_settings(None, os.environ, flags)
    try:
        autoscale = _autoscale(args.autoscale)
    except ValueError:
        print("inferd ray serve: --autoscale takes MIN,MAX (e.g. 1,4)", file=sys.stderr)
        return 2
    if args.address is None:  # (before ray is imported: it reads some of them then)
        # the local cluster inherits them
        os.environ.update(local_cluster_env(os.environ, args.multiplex))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        from ray import serve

        from inferd.rayserve.deploy import APP_NAME, RayDeployment, deploy, wait_routed
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
        multiplex=args.multiplex,
    )
    try:
        deployment.options()
    except ValueError as exc:
        print(f"inferd ray serve: {exc}", file=sys.stderr)
        return 2
    ray.init(address=args.address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
        deploy(deployment)
        wait_routed(settings.host, settings.port)
        print(
            f"inferd on Ray Serve: http://{settings.host}:{settings.port} "
            f"({'autoscaling ' + args.autoscale if autoscale else f'{args.replicas} replicas'}"
            f"{', routed by model' if args.multiplex else ''})",
            flush=True,
        )
        _until_stopped()
        print("inferd on Ray Serve: draining the replicas", flush=True)
        serve.delete(APP_NAME)  # each replica's lifespan drains it
    finally:
        ray.shutdown()
    return 0
