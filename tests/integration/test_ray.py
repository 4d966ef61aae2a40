"""inferd on Ray Serve, on a real local Ray cluster of two nodes (`ray start`, loopback), with
Serve's direct ingress and HAProxy (inferd ray serve's default): `inferd ray serve` deploys two
replicas that both answer and drain on SIGTERM; a replica killed under load loses no request
that HAProxy could send elsewhere, the rest get a clear error and none hangs; the replicas
scale up when inferd's queues grow; with `--multiplex`, through Serve's proxy, a request
naming its model goes to the replica that holds it. `inferd ray serve` on a cluster of its own
keeps to loopback, has token authentication without writing a token home, and stops in
seconds.

The clusters have an environment of their own (a home folder, the authentication mode), so
that what the user's home holds (a `~/.ray/auth_token`) does not change them; a cluster
that fails to start stops what it started."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
import ray
from ray import serve

from inferd.bench.launch import free_port
from inferd.config.server_settings import ServerSettings
from inferd.rayserve.deploy import APP_NAME, RayDeployment, deploy
from inferd.rayserve.local import LocalRay, haproxy_env
from tests.models import affine_model, slow_model, write_config

AFFINE = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRay]:
    root = Path(tempfile.mkdtemp(prefix="lr", dir="/tmp"))  # (socket paths: 107 bytes)
    running = LocalRay(root)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ray-repo")
    affine_model(root / "affine" / "1" / "model.onnx")
    write_config(root / "affine", {"max_batch_size": 8})
    slow_model(root / "slow" / "1" / "model.onnx", layers=24, width=256)
    # its queue must grow for Serve to scale on it: no queue-time bound sheds it meanwhile
    # (a replica starting beside it slows its runs; shedding is test_shedding.py's to test)
    write_config(
        root / "slow",
        {
            "max_batch_size": 1,
            "dynamic_batching": {"max_queue_size": 256, "max_queue_time_ms": None},
        },
    )
    return root


@pytest.fixture(scope="module")
def driver(cluster: LocalRay) -> Iterator[None]:
    """This process connected to the cluster, Serve's HTTP port on loopback; with the
    cluster's environment (its home, its authentication) while it is."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in cluster.env.items():
            if name.startswith("RAY_") or name == "HOME":
                env.setenv(name, value)
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": cluster.http_port})
        try:
            yield
        finally:
            serve.shutdown()
            ray.shutdown()


def running_replicas() -> int:
    return int(_replica_states().get("RUNNING", 0))


def added_replicas() -> int:
    """Replicas Serve has added and not stopped: starting ones too (a start on a loaded 2-core
    machine can take longer than a load step lasts)."""
    return sum(n for state, n in _replica_states().items() if state != "STOPPING")


def _replica_states() -> dict[str, int]:
    status = serve.status().applications.get(APP_NAME)
    if status is None:
        return {}
    return dict(status.deployments[APP_NAME].replica_states)


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.5)


def served(url: str) -> bool:
    """Whether the cluster's HTTP ingress answers for the app (Ray restarts a proxy that failed
    at startup: CI once had its HAProxy crash on one node, and a load sent then reached no
    replica)."""
    try:
        return httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def haproxy_2xx_by_server(cluster: LocalRay) -> dict[str, int]:
    """The 2xx answers of each replica, from HAProxy's statistics (CSV)."""
    port = cluster.env["RAY_SERVE_HAPROXY_STATS_PORT"]
    text = httpx.get(f"http://127.0.0.1:{port}/stats;csv", timeout=10).text
    header, *rows = [line for line in text.splitlines() if line]
    names = header.lstrip("# ").split(",")
    answered = {}
    for row in csv.reader(rows):
        fields = dict(zip(names, row, strict=False))
        if fields["pxname"] != f"http-{APP_NAME}" or not fields["svname"].startswith(
            "SERVE_REPLICA"
        ):
            continue
        answered[fields["svname"]] = int(fields["hrsp_2xx"] or 0)
    return answered


def test_inferd_ray_serve_deploys_replicas_that_all_answer_and_drain(
    cluster: LocalRay, repo: Path, driver: None, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{cluster.http_port}"
    log = tmp_path / "cli.log"
    with log.open("wb") as out:
        cli = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "inferd",
                "ray",
                "serve",
                "--address",
                cluster.address,
                "--repo",
                str(repo),
                "--replicas",
                "2",
                "--num-cpus",
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                str(cluster.http_port),
                "--log-level",
                "warning",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cluster.env,
        )
    try:
        wait_for(lambda: "inferd on Ray Serve: http" in log.read_text(), 180, log.read_text())
        assert running_replicas() == 2
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/v2/health/ready").status_code == 200
            for _ in range(40):
                answer = client.post("/v2/models/affine/infer", json=AFFINE)
                assert answer.status_code == 200, answer.text
                assert answer.json()["outputs"][0]["data"] == [3.0, 5.0, 7.0, 9.0]
        # every replica (one on each node) answered some of them: HAProxy's own count of
        # the 2xx answers of each server of the app's backend
        answered = haproxy_2xx_by_server(cluster)
        assert len(answered) == 2 and all(n > 0 for n in answered.values()), answered
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=90) == 0, log.read_text()
        assert "draining the replicas" in log.read_text()
        wait_for(lambda: running_replicas() == 0, 60, "the replicas stopped")
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


async def _load(
    url: str,
    clients: int,
    seconds: float,
    model: str,
    body: dict[str, Any],
    until: asyncio.Event | None = None,
) -> list[tuple[float, int | str]]:
    """Closed loop for `seconds`, or until `until` is set; each request's (start time,
    status or the client error's name)."""
    outcomes: list[tuple[float, int | str]] = []
    stop = time.monotonic() + seconds

    async def client(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop and not (until is not None and until.is_set()):
            started = time.monotonic()
            try:
                answer = await http.post(f"/v2/models/{model}/infer", json=body)
                outcomes.append((started, answer.status_code))
            except httpx.TimeoutException:
                outcomes.append((started, "timeout"))
            except httpx.TransportError as exc:
                outcomes.append((started, type(exc).__name__))

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=20, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return outcomes


def test_a_replica_killed_under_load_loses_only_what_it_held(
    cluster: LocalRay, repo: Path, driver: None
) -> None:
    url = f"http://127.0.0.1:{cluster.http_port}"
    settings = ServerSettings(repository=repo, log_level="warning")
    deploy(RayDeployment(settings, replicas=2, num_cpus=1, max_ongoing_requests=8))
    wait_for(lambda: running_replicas() == 2, 120, "two replicas")
    wait_for(lambda: served(url), 60, "the ingress answers")
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 256], "data": [0.1] * 256}]}

    async def scenario() -> tuple[float, list[tuple[float, int | str]]]:
        load = asyncio.create_task(_load(url, 8, 10.0, "slow", body))
        await asyncio.sleep(3.0)
        names = [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith("SERVE_REPLICA::")
        ]
        victim = ray.get_actor(sorted(names)[0], namespace="serve")
        killed_at = time.monotonic()
        ray.kill(victim, no_restart=True)
        return killed_at, await load

    try:
        killed_at, outcomes = asyncio.run(scenario())
        statuses = [status for _, status in outcomes]
        assert "timeout" not in statuses  # none hangs
        failed = [(t, s) for t, s in outcomes if s != 200]
        # what fails is what the killed replica held (at most its max_ongoing_requests), and
        # what a client sent again at once, before HAProxy saw the replica gone (each of the 8
        # clients once more at most: CI once had 9, one client failing twice within 0.1 s);
        # each a clear answer or a reset connection, never a hang
        assert len(failed) <= 2 * 8, failed
        # (Ray's HAProxy answers 500 "Internal Server Error" for a request its replica dropped)
        assert all(s in (500, "RemoteProtocolError", "ReadError") for _, s in failed), failed
        assert all(killed_at - 1.0 <= t <= killed_at + 3.0 for t, _ in failed), failed
        # requests sent once HAProxy knows went to the replica left, and succeeded
        late = [s for t, s in outcomes if t > killed_at + 3.0]
        assert late and all(s == 200 for s in late), late
        assert statuses.count(200) > 50
        wait_for(lambda: running_replicas() == 2, 120, "Serve replaced the killed replica")
    finally:
        serve.delete(APP_NAME)  # (a failure here must not leave replicas to the next test)


def test_replicas_scale_up_when_queues_grow(cluster: LocalRay, repo: Path, driver: None) -> None:
    url = f"http://127.0.0.1:{cluster.http_port}"
    settings = ServerSettings(repository=repo, log_level="warning")
    deployment = RayDeployment(
        settings,
        autoscale=(1, 2),
        queue_target=2.0,
        num_cpus=1,
        upscale_delay_s=1.0,
        downscale_delay_s=600.0,
    )
    deploy(deployment)
    assert running_replicas() == 1
    wait_for(lambda: served(url), 60, "the ingress answers")
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 256], "data": [0.1] * 256}]}
    scaled_at: list[float] = []

    async def scenario() -> list[tuple[float, int | str]]:
        # the load lasts until Serve adds a replica, 90 s at most (fresh-clone CIs on this
        # 2-core machine twice saw none within a 40 s load, after the heavier tests before it)
        enough = asyncio.Event()
        load = asyncio.create_task(_load(url, 24, 90.0, "slow", body, until=enough))
        started = time.monotonic()
        while not load.done():
            if await asyncio.to_thread(added_replicas) >= 2:
                scaled_at.append(time.monotonic() - started)
                enough.set()
                break
            await asyncio.sleep(0.5)
        return await load

    try:
        outcomes = asyncio.run(scenario())
        assert scaled_at, (
            "the queue grew and Serve did not add a replica within 90 s: replicas "
            f"{_replica_states()}, answers {Counter(s for _, s in outcomes)}"
        )
        assert all(status == 200 for _, status in outcomes), {s for _, s in outcomes}
        wait_for(lambda: running_replicas() == 2, 120, "the added replica runs")
        answer = httpx.post(f"{url}/v2/models/affine/infer", json=AFFINE, timeout=30)
        np.testing.assert_allclose(answer.json()["outputs"][0]["data"], [3.0, 5.0, 7.0, 9.0])
    finally:
        serve.delete(APP_NAME)


def test_a_node_that_fails_to_start_stops_the_cluster_it_was_joining() -> None:
    started: list[LocalRay] = []
    root = Path(tempfile.mkdtemp(prefix="lrf", dir="/tmp"))  # (socket paths: 107 bytes)

    class SecondNodeFails(LocalRay):
        def _start(self, *args: str) -> None:
            started.append(self)
            if "--head" not in args:  # an object store under Ray's minimum: refused
                args = (*args, "--object-store-memory", "1024")
            super()._start(*args)

    try:
        with pytest.raises(RuntimeError, match="ray start --address"):
            SecondNodeFails(root)
        assert len(started) == 2
        assert started[0].processes() == []  # the head it had started is gone
    finally:
        shutil.rmtree(root, ignore_errors=True)


def loopback(address: str) -> bool:
    """127.0.0.1 or ::1, an IPv4 one as an IPv6 socket shows it (::ffff:127.0.0.1) too."""
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


def _tree(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _name(process: psutil.Process) -> str:
    """A process's name; "" once it has ended (Ray's short-lived workers come and go)."""
    try:
        return str(process.name())
    except psutil.NoSuchProcess:
        return ""


def test_inferd_ray_serve_on_its_own_cluster_keeps_to_loopback_and_its_token_and_stops_promptly(
    repo: Path, tmp_path: Path
) -> None:
    """No `--address`: a local cluster of its own, on loopback, with token authentication
    and a token of its own that is written nowhere (the home folder stays empty), stopped
    within seconds of SIGTERM (Serve's direct ingress keeps a stopping replica reachable for
    30 s by default: `inferd ray serve` makes it 2 s on its own cluster)."""
    home = tmp_path / "home"
    home.mkdir()
    haproxy = Path(tempfile.mkdtemp(prefix="ihp", dir="/tmp"))
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
        "HOME": str(home),
        "RAY_TMPDIR": str(haproxy),
        **haproxy_env(haproxy),
    }
    log = tmp_path / "cli.log"
    with log.open("wb") as out:
        cli = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "inferd",
                "ray",
                "serve",
                "--repo",
                str(repo),
                "--num-cpus",
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    seen: list[psutil.Process] = []
    try:
        wait_for(lambda: "inferd on Ray Serve: http" in log.read_text(), 240, log.read_text())
        answer = httpx.post(f"http://127.0.0.1:{port}/v2/models/affine/infer", json=AFFINE)
        assert answer.status_code == 200, answer.text
        seen = _tree(psutil.Process(cli.pid))
        listening = set()
        for process in seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                conns = process.net_connections(kind="tcp")
                listening |= {
                    (process.name(), c.laddr.ip, c.laddr.port)
                    for c in conns
                    if c.status == psutil.CONN_LISTEN
                }
        # on loopback, but for what Ray 2.60 binds on every interface whatever it is told:
        # HAProxy's statistics and metrics ports (its configuration template) and one
        # listener of Serve's in each replica (on [::])
        outside = {
            (name, port)
            for name, ip, port in listening
            if not loopback(ip) and not name.startswith("ray::ServeReplica")
        }
        haproxy_ports = {
            ("haproxy", int(env["RAY_SERVE_HAPROXY_STATS_PORT"])),
            ("haproxy", int(env["RAY_SERVE_HAPROXY_METRICS_PORT"])),
        }
        assert outside <= haproxy_ports, sorted(a for a in listening if not loopback(a[1]))
        (gcs,) = [p for p in seen if "gcs_server" in _name(p)]
        assert gcs.environ().get("RAY_AUTH_MODE") == "token"
        assert len(gcs.environ().get("RAY_AUTH_TOKEN", "")) == 64
        assert not (home / ".ray").exists(), list(home.rglob("*"))

        cli.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert cli.wait(timeout=120) == 0, log.read_text()
        stopped_s = time.monotonic() - signalled
        assert stopped_s < 20, f"{stopped_s:.1f} s to stop"
        _, alive = psutil.wait_procs(seen, timeout=20)
        assert not alive, alive
        assert not (home / ".ray").exists()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        for process in seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        shutil.rmtree(haproxy, ignore_errors=True)


VIEWS = """
import json, logging, sys
import ray
from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE
ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
replicas = ray.get(controller._all_running_replicas.remote())
print(json.dumps({
    info.replica_id.unique_id: sorted(info.multiplexed_model_ids)
    for deployment, infos in replicas.items() if deployment.name == sys.argv[2]
    for info in infos
}))
"""


def serve_model_views(cluster: LocalRay) -> dict[str, list[str]]:
    """Each replica's multiplexed model ids as Serve's controller holds them (what its routers
    route by), read by a driver of its own (this process may be another cluster's driver)."""
    done = subprocess.run(
        [sys.executable, "-c", VIEWS, cluster.address, APP_NAME],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    views: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return views


@pytest.mark.timeout(480)  # its cluster and deployment start within the test
def test_requests_naming_their_model_go_to_the_replica_that_holds_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`inferd ray serve --multiplex`, 2 replicas each holding at most 2 of 5 on-demand models
    (`--max-loaded-versions 2`), on a cluster with Serve's proxy (HAProxy does not route by
    model). Requests that name their model in `serve_multiplexed_model_id` go to the replica
    that holds it: once the four first models are placed, none waits for a load; Serve's view
    of each replica is what its inferd holds, and follows inferd's evictions. The same requests
    without the header wait for loads."""
    root = Path(tempfile.mkdtemp(prefix="lrm", dir="/tmp"))  # (socket paths: 107 bytes)
    repo = tmp_path_factory.mktemp("ray-many")
    models = [f"m{i}" for i in range(5)]
    for name in models:
        affine_model(repo / name / "1" / "model.onnx")
        write_config(repo / name, {"max_batch_size": 8, "residency": "on_demand"})
    cluster = LocalRay(root, direct_ingress=False)
    url = f"http://127.0.0.1:{cluster.http_port}"
    log = root / "cli.log"
    with log.open("wb") as out:
        cli = subprocess.Popen(
            [
                *(sys.executable, "-m", "inferd", "ray", "serve", "--multiplex"),
                *("--address", cluster.address, "--repo", str(repo), "--replicas", "2"),
                *("--num-cpus", "1", "--max-loaded-versions", "2", "--no-response-cache"),
                *("--client-loads-per-minute", "0"),  # (every request from Serve's proxy)
                *("--host", "127.0.0.1", "--port", str(cluster.http_port)),
                *("--log-level", "warning"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cluster.env,
        )

    def ask(client: httpx.Client, model: str, named: bool) -> bool:
        """Whether the answer waited for its model's load."""
        headers = {"serve_multiplexed_model_id": model} if named else {}
        answer = client.post(f"/v2/models/{model}/infer", json=AFFINE, headers=headers)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [3.0, 5.0, 7.0, 9.0]
        return "load;dur" in answer.headers.get("server-timing", "")

    def traffic(named: bool) -> int:
        """40 requests, 4 clients, the first four models in turn: how many waited for a load."""

        def client(offset: int) -> int:
            with httpx.Client(base_url=url, timeout=60) as http:
                return sum(ask(http, models[(offset + i) % 4], named) for i in range(10))

        with ThreadPoolExecutor(4) as pool:
            return sum(pool.map(client, range(4)))

    try:
        wait_for(lambda: "inferd on Ray Serve: http" in log.read_text(), 240, log.read_text())
        assert "routed by model" in log.read_text()
        with httpx.Client(base_url=url, timeout=60) as http:
            for model in models[:4]:  # each to the replica holding the fewest, once it knows
                assert ask(http, model, named=True)
                time.sleep(1.5)
        views = serve_model_views(cluster)
        assert len(views) == 2 and all(len(held) == 2 for held in views.values()), views
        assert sorted(m for held in views.values() for m in held) == models[:4], views

        assert traffic(named=True) == 0  # each to the replica that holds its model

        with httpx.Client(base_url=url, timeout=60) as http:
            assert ask(http, models[4], named=True)  # its replica's inferd evicts one of its two
        time.sleep(1.5)
        after = serve_model_views(cluster)
        assert after.keys() == views.keys()
        # Serve's view dropped the model inferd evicted: still two on each replica
        assert all(len(held) == 2 for held in after.values()), (views, after)
        (grew,) = [r for r, held in after.items() if models[4] in held]
        assert len(set(after[grew]) & set(views[grew])) == 1, (views, after)
        assert all(after[r] == views[r] for r in after if r != grew), (views, after)

        unnamed = traffic(named=False)  # Serve routes on queue lengths alone: half miss
        assert unnamed > 0
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=90) == 0, log.read_text()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
