"""The serving image, built and run by a container engine of the test's own
(tests/docker_engine.py): the repository's Dockerfile, built on a stand-in for `python:3.11-slim`
made from the Debian archive (no image registry is reachable), and the container run the way the
Kubernetes Deployment (deploy/kubernetes, rendered with `kubectl kustomize`) runs it: its image
name and arguments, its user and group, a read-only root filesystem with /tmp an emptyDir, no
capabilities, its memory limit, and the model repository mounted read-only as its volume mounts
lay it out. Against the running container: the Deployment's probes on the container's address
and named ports, a V2 inference, gRPC health, /metrics at the ServiceMonitor's path; then the
preStop hook and `docker stop`, which drains what is in flight and exits 0 within the
termination grace period. The engine's changes to the host's networking are undone after, also
when a test fails.

What a cluster adds (the kubelet, scheduling, a network plugin, volume ownership by fsGroup) is
not tested here. The image's size and start-to-ready time are printed (`pytest -s`)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import onnx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from onnx import TensorProto, helper, numpy_helper

from tests.docker_engine import DockerEngine, base_image, docker_engine, host_state
from tests.integration.test_kubernetes import KUBE, ROOT, arg, container, of_kind, render

CACHE = ROOT / ".cache" / "container"
"""The Debian root filesystem between runs (git-ignored; mmdebstrap builds it when missing)."""
SIZE_GOAL = 400 * 10**6
"""The image's size (bytes, as `docker image ls` counts them) it must stay under."""
BUSY_WIDTH, BUSY_LAYERS = 256, 1024
ROWS = 64

pytestmark = pytest.mark.timeout(900)  # the first run builds the base file system (mmdebstrap)


def encoder_model(path: Path) -> Path:
    """x: FP32 [batch, 4] -> y = 2x + 1, and busy: FP32 [batch, 1], x tiled to BUSY_WIDTH
    through BUSY_LAYERS MatMul+Tanh layers and summed: the work that keeps a request in
    flight long enough to be drained."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    busy = helper.make_tensor_value_info("busy", TensorProto.FLOAT, ["batch", 1])
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((BUSY_WIDTH, BUSY_WIDTH)) / np.sqrt(BUSY_WIDTH)
    initializers = [
        numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array(np.array([1, BUSY_WIDTH // 4], dtype=np.int64), "repeats"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "last"),
        numpy_helper.from_array(weight.astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Add", ["x2", "one"], ["y"]),
        helper.make_node("Tile", ["x", "repeats"], ["h"]),
    ]
    previous = "h"
    for i in range(BUSY_LAYERS):
        nodes.append(helper.make_node("MatMul", [previous, "w"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]))
        previous = f"t{i}"
    nodes.append(helper.make_node("ReduceSum", [previous, "last"], ["busy"], keepdims=1))
    graph = helper.make_graph(nodes, "encoder", [x], [y, busy], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def quantity(text: str) -> int:
    """A Kubernetes quantity in bytes ("4Gi", "512Mi", "1G")."""
    number, unit = re.fullmatch(r"(\d+)([KMGT]i?)?", text).groups()  # type: ignore[union-attr]
    scale = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    scale |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(number) * scale[unit or ""]


def infer_body(rows: int, start: float = 1.0) -> dict[str, Any]:
    x = (np.arange(rows * 4, dtype=np.float32) + start).reshape(rows, 4)
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 4], "data": x.tolist()}]}


def y_of(answer: dict[str, Any]) -> list[float]:
    (y,) = [o for o in answer["outputs"] if o["name"] == "y"]
    data: list[float] = y["data"]
    return data


# -- the engine alone: it leaves the host as it found it -------------------------------------


def test_the_engine_leaves_the_host_as_it_found_it_also_when_a_test_fails() -> None:
    """First in the module: the module's engine (below) must not be running beside it."""
    before = host_state()
    with pytest.raises(RuntimeError, match="a test that fails"), docker_engine() as engine:
        # a bridge of its own with its iptables rules, besides docker0, ip_forward, DOCKER chains
        engine.docker("network", "create", "inferd-test-net")
        during = host_state()
        assert "docker0" in during.links
        assert any(link.startswith("br-") for link in during.links)
        assert any("DOCKER" in rule for rule in during.rules["filter"])
        forwarding = "/proc/sys/net/ipv4/ip_forward"
        assert during.sysctls[forwarding] == "1"
        if before.sysctls[forwarding] == "0":  # dockerd turned forwarding on and dropped it
            assert "-P FORWARD DROP" in during.rules["filter"]
        raise RuntimeError("a test that fails")
    after = host_state()
    assert after.sysctls == before.sysctls
    assert after.links == before.links
    assert after.rules == before.rules
    assert after.paths == before.paths
    assert [m for m in after.mounts if m not in before.mounts] == []
    assert not engine.folder.exists()
    assert engine.process.poll() is not None


# -- the image -------------------------------------------------------------------------------


@dataclass
class Image:
    tag: str
    size: int
    base_size: int
    build_s: float


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render(KUBE / "overlays" / "single")


@pytest.fixture(scope="module")
def deployment(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = of_kind(rendered, "Deployment")
    return found


@pytest.fixture(scope="module")
def engine() -> Iterator[DockerEngine]:
    with docker_engine() as running:
        yield running


@pytest.fixture(scope="module")
def image(engine: DockerEngine, deployment: dict[str, Any]) -> Image:
    base = base_image(engine, CACHE)  # (what the script builds where none can be pulled)
    tag = container(deployment)["image"]
    started = time.monotonic()
    built_by = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image.sh"), tag],
        capture_output=True,
        text=True,
        timeout=900,
        env=engine.env,
    )
    assert built_by.returncode == 0, built_by.stderr[-4000:]
    assert built_by.stdout.strip().splitlines()[-1].startswith(f"built {tag}: ")
    build_s = time.monotonic() - started

    def size(name: str) -> int:
        return int(engine.docker("image", "inspect", "--format", "{{.Size}}", name))

    built = Image(tag, size(tag), size(base), build_s)
    print(
        f"\nimage {tag}: {built.size / 1e6:.0f} MB ({built.base_size / 1e6:.0f} MB of it the "
        f"base image), built in {build_s:.0f} s"
    )
    return built


def test_the_image_is_small_and_holds_no_build_tools(engine: DockerEngine, image: Image) -> None:
    assert image.size < SIZE_GOAL, f"{image.size / 1e6:.0f} MB"
    config = engine.docker("image", "inspect", "--format", "{{json .Config.User}}", image.tag)
    assert config.strip() == '"10001:10001"'
    # no compiler, no pip (nor its cache), no source tree, no wheels in the final stage
    script = (
        "for b in gcc cc c++ make; do command -v $b; done;"
        " ls -d /opt/inferd/bin/pip* /root/.cache /src /wheels 2>/dev/null;"
        " ls -d /opt/inferd/lib/python3*/site-packages/numpy/_core/tests 2>/dev/null;"
        " /opt/inferd/bin/python -m pip --version 2>/dev/null;"
        " /opt/inferd/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)'"
    )
    out = engine.docker("run", "--rm", "--entrypoint", "sh", image.tag, "-c", script)
    assert re.fullmatch(r"\d+\.\d+\.\d+\n", out), out


# -- the container as the Deployment runs it ---------------------------------------------------


@dataclass
class Running:
    name: str
    url: str
    """Its HTTP port, published on 127.0.0.1."""
    grpc_target: str
    address: str
    """The container's own address (the pod IP a kubelet probes)."""
    ready_s: float


def lay_out(deployment: dict[str, Any], config_maps: dict[str, Any], root: Path) -> list[str]:
    """Host folders for the Deployment's volume mounts, and the `docker run` mounts that put
    them where the pod has them: the ConfigMap's file and the repository volume's version
    folder read-only, an emptyDir as a tmpfs of its size limit."""
    main = container(deployment)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    flags = []
    for mount in main["volumeMounts"]:
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        source = root / mount["name"]
        if "emptyDir" in volume:
            limit = quantity(volume["emptyDir"].get("sizeLimit", "64Mi"))
            flags += ["--mount", f"type=tmpfs,destination={target},tmpfs-size={limit}"]
            continue
        assert mount.get("readOnly") is True, f"{target} is mounted read-only"
        if "configMap" in volume:
            data = config_maps[volume["configMap"]["name"]]["data"]
            source.mkdir(parents=True)
            source = source / mount["subPath"]
            source.write_text(data[mount["subPath"]])
        else:
            assert volume["persistentVolumeClaim"]["readOnly"] is True
            encoder_model(source / "model.onnx")
        for path in [source, *source.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by the pod's user
        flags += ["--mount", f"type=bind,source={source},destination={target},readonly"]
    return flags


def security_flags(deployment: dict[str, Any]) -> list[str]:
    """The pod's and the container's security context and memory limit as `docker run` flags."""
    pod = deployment["spec"]["template"]["spec"]["securityContext"]
    main = container(deployment)
    context = main["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"  # docker's default profile
    flags = [
        "--user",
        f"{pod['runAsUser']}:{pod['runAsGroup']}",
        "--group-add",
        str(pod["fsGroup"]),
    ]
    if context["readOnlyRootFilesystem"]:
        flags.append("--read-only")
    if context["allowPrivilegeEscalation"] is False:
        flags += ["--security-opt", "no-new-privileges"]
    flags += [f"--cap-drop={c}" for c in context["capabilities"]["drop"]]
    flags += ["--memory", str(quantity(main["resources"]["limits"]["memory"]))]
    return flags


@pytest.fixture(scope="module")
def running(
    engine: DockerEngine,
    image: Image,
    rendered: list[dict[str, Any]],
    deployment: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Running]:
    config_maps = {c["metadata"]["name"]: c for c in of_kind(rendered, "ConfigMap")}
    root = tmp_path_factory.mktemp("pod")
    root.chmod(0o755)
    mounts = lay_out(deployment, config_maps, root)
    main = container(deployment)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    published = [f"--publish=127.0.0.1::{port}" for port in ports.values()]
    name = "inferd-pod"
    started = time.monotonic()
    engine.docker(
        "run", "--detach", "--name", name, *security_flags(deployment), *mounts, *published,
        image.tag, *main["args"],
    )  # fmt: skip
    try:

        def host_port(port: int) -> str:
            return engine.docker("port", name, f"{port}/tcp").splitlines()[0].strip()

        url = f"http://{host_port(ports['http'])}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/v2/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            state = engine.docker("inspect", "--format", "{{.State.Status}}", name).strip()
            assert state == "running", engine.docker("logs", name)
            assert time.monotonic() < deadline, engine.docker("logs", name)
            time.sleep(0.05)
        ready_s = time.monotonic() - started
        print(f"\ncontainer: docker run to /v2/health/ready 200 in {ready_s:.1f} s")
        address = engine.docker(
            "inspect", "--format", "{{.NetworkSettings.IPAddress}}", name
        ).strip()
        yield Running(name, url, host_port(ports["grpc"]), address, ready_s)
    finally:
        engine.docker("rm", "--force", name, check=False)


def test_the_deployments_probes_answer_on_the_containers_address(
    running: Running, deployment: dict[str, Any]
) -> None:
    main = container(deployment)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = main[probe]["httpGet"]
        url = f"http://{running.address}:{ports[get['port']]}{get['path']}"
        timeout = main[probe].get("timeoutSeconds", 1)
        assert httpx.get(url, timeout=timeout).status_code == 200, url


def test_a_v2_inference_grpc_health_and_metrics(
    running: Running, rendered: list[dict[str, Any]]
) -> None:
    answer = httpx.post(
        f"{running.url}/v2/models/encoder/versions/1/infer", json=infer_body(2), timeout=30
    )
    assert answer.status_code == 200, answer.text
    assert y_of(answer.json()) == [3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0, 17.0]
    assert answer.json()["model_version"] == "1"
    with grpc.insecure_channel(running.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    (monitor,) = of_kind(rendered, "ServiceMonitor")
    metrics = httpx.get(running.url + monitor["spec"]["endpoints"][0]["path"], timeout=10).text
    assert 'inferd_queue_depth{model="encoder",version="1"}' in metrics
    served = 0.0
    for line in metrics.splitlines():
        if line.startswith("inferd_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels["model"] == "encoder" and labels["status"] == "200":
                served += float(line.rsplit(" ", 1)[1])
    assert served == 1, metrics[:2000]


def test_pre_stop_then_docker_stop_drains_within_the_grace_period(
    engine: DockerEngine, running: Running, deployment: dict[str, Any]
) -> None:
    """Last in the module: it stops the container."""
    spec = deployment["spec"]["template"]["spec"]
    grace = spec["terminationGracePeriodSeconds"]
    pre_stop = container(deployment)["lifecycle"]["preStop"]["exec"]["command"]
    assert float(arg(container(deployment)["args"], "--drain-timeout-s")) < grace
    started = time.monotonic()
    # the kubelet runs the hook in the container, then sends SIGTERM; the grace period counts
    # from the hook's start
    engine.docker("exec", running.name, *pre_stop, timeout=grace)
    count = 8

    def post(i: int) -> tuple[float, httpx.Response]:
        response = httpx.post(
            f"{running.url}/v2/models/encoder/infer",
            json=infer_body(ROWS, start=i),
            timeout=grace,
        )
        return time.monotonic(), response

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(post, i) for i in range(count)]
        time.sleep(0.5)  # sent, admitted, queued behind each other
        stopping = time.monotonic()
        left = max(1, int(grace - (stopping - started)))
        engine.docker("stop", "--time", str(left), running.name, timeout=grace + 30)
        stopped = time.monotonic()
        answered = [f.result() for f in futures]
    exit_code = engine.docker("inspect", "--format", "{{.State.ExitCode}}", running.name)
    logs = engine.docker("logs", running.name)
    assert exit_code.strip() == "0", logs[-4000:]
    assert stopped - started < grace
    for i, (_, response) in enumerate(answered):
        assert response.status_code == 200, response.text
        first_row = infer_body(ROWS, start=i)["inputs"][0]["data"][0]
        assert y_of(response.json())[:4] == [2 * v + 1 for v in first_row]
    in_flight = [at for at, _ in answered if at > stopping]
    assert in_flight, "no request was still in flight when SIGTERM came: nothing was drained"
    print(
        f"\ndocker stop: {len(in_flight)} of {count} requests answered after SIGTERM; "
        f"hook + drain + exit {stopped - started:.1f} s (grace {grace} s)"
    )
