"""deploy/kubernetes: every overlay renders with `kubectl kustomize`, every rendered object
passes schema validation offline (built-in kinds with kubernetes-validate, strict; Gateway
API, Istio and Prometheus Operator resources with their CRDs' schemas through
tests/kubernetes/validate_crds.mjs), and what the manifests say of the server is what the
server does: each Deployment's arguments start a real inferd on a repository laid out as its
volume mounts lay it out, its probe paths answer on its named ports, its drain fits in its
termination grace period, and the metric the autoscaler reads is one the server exports.

No cluster here: what a cluster would add (scheduling, the kubelet's probing, the mesh) is not
tested. The image itself is built and run as the Deployment runs it in test_container.py."""

from __future__ import annotations

import copy
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from tests.integration.server import RunningServer, free_ports, start_server
from tests.models import affine_model

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p for p in (KUBE / "overlays").iterdir() if p.is_dir())
VALIDATOR = ROOT / "tests" / "kubernetes" / "validate_crds.mjs"
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
"""The oldest Kubernetes the manifests support, and the newest the validator knows."""
BUILT_IN_GROUPS = {"v1", "apps/v1", "policy/v1", "autoscaling/v2"}
CRD_KINDS = {"HTTPRoute", "DestinationRule", "VirtualService", "ServiceMonitor"}


def render(overlay: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the manifests (it renders offline)"
    done = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    assert {p.name for p in OVERLAYS} >= {"single", "canary-gateway", "canary-istio"}
    return {overlay.name: render(overlay) for overlay in OVERLAYS}


def validate_crds(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    node = shutil.which("node")
    assert node, "node is needed to validate the custom resources"
    assert (VALIDATOR.parent / "node_modules").is_dir(), (
        "run `npm ci` in tests/kubernetes (scripts/test.sh does)"
    )
    done = subprocess.run(
        [node, str(VALIDATOR)], input=json.dumps(objects), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


# -- rendering and schemas ------------------------------------------------------------------


def test_every_overlay_renders_what_it_promises(rendered: dict[str, list[dict[str, Any]]]) -> None:
    kinds = {name: sorted({o["kind"] for o in objects}) for name, objects in rendered.items()}
    for name in ("single", "canary-gateway", "canary-istio"):
        assert {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"} <= set(
            kinds[name]
        )
        assert "ServiceMonitor" in kinds[name]
    assert len(of_kind(rendered["canary-gateway"], "Deployment")) == 2
    assert "HTTPRoute" in kinds["canary-gateway"]
    assert {"VirtualService", "DestinationRule"} <= set(kinds["canary-istio"])


def test_built_in_objects_pass_strict_schema_validation(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    checked = 0
    for objects in rendered.values():
        for obj in objects:
            if obj["kind"] in CRD_KINDS:
                continue
            assert obj["apiVersion"] in BUILT_IN_GROUPS, obj["apiVersion"]
            for version in KUBERNETES_VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)
                checked += 1
    assert checked > 0
    typo = copy.deepcopy(of_kind(rendered["single"], "Deployment")[0])
    typo["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):  # the validator does bite
        kubernetes_validate.validate(typo, KUBERNETES_VERSIONS[-1], strict=True)


def test_custom_resources_pass_their_crd_schemas(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    custom = [o for objects in rendered.values() for o in objects if o["kind"] in CRD_KINDS]
    assert {o["kind"] for o in custom} == CRD_KINDS
    results = validate_crds(custom)
    assert [r for r in results if r["error"] is not None] == []
    broken = copy.deepcopy(of_kind(rendered["canary-gateway"], "HTTPRoute")[0])
    broken["spec"]["rules"][-1]["backendRefs"][0]["weight"] = -5
    (result,) = validate_crds([broken])
    assert result["error"] and "weight" in result["error"]


# -- the manifests against the server -------------------------------------------------------


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (main,) = deployment["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = main
    return result


def test_ports_services_and_drain_timings_agree(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for objects in rendered.values():
        services = of_kind(objects, "Service")
        for deployment in of_kind(objects, "Deployment"):
            spec = deployment["spec"]["template"]["spec"]
            main = container(deployment)
            args = main["args"]
            ports = {p["name"]: p["containerPort"] for p in main["ports"]}
            assert ports == {
                "http": int(arg(args, "--port")),
                "grpc": int(arg(args, "--grpc-port")),
            }
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                assert main[probe]["httpGet"]["port"] in ports
            # the kubelet waits for the preStop pause, then inferd's whole drain, with room
            pause = int(main["lifecycle"]["preStop"]["exec"]["command"][-1])
            drain = float(arg(args, "--drain-timeout-s"))
            assert spec["terminationGracePeriodSeconds"] >= pause + drain + 5
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            selecting = [
                s
                for s in services
                if all(labels.get(k) == v for k, v in s["spec"]["selector"].items())
            ]
            assert selecting, f"no Service selects {deployment['metadata']['name']}"
            for service in selecting:
                assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
        for monitor in of_kind(objects, "ServiceMonitor"):
            wanted = monitor["spec"]["selector"]["matchLabels"]
            scraped = [
                s
                for s in services
                if all(s["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
            ]
            assert scraped, "the ServiceMonitor selects no Service"
            for service in scraped:
                names = {p["name"] for p in service["spec"]["ports"]}
                assert {e["port"] for e in monitor["spec"]["endpoints"]} <= names
        for hpa in of_kind(objects, "HorizontalPodAutoscaler"):
            target = hpa["spec"]["scaleTargetRef"]["name"]
            assert target in {d["metadata"]["name"] for d in of_kind(objects, "Deployment")}


def lay_out_repository(deployment: dict[str, Any], config_maps: dict[str, Any], root: Path) -> Path:
    """The repository the pod would see: each read-only mount under --repo, filled as the
    volume would fill it (the ConfigMap's file; a model for the repository volume's version
    folder)."""
    main = container(deployment)
    repo_in_pod = arg(main["args"], "--repo")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    repo = root / "repo"
    for mount in main["volumeMounts"]:
        if not mount["mountPath"].startswith(repo_in_pod + "/"):
            continue
        assert mount.get("readOnly") is True, "the repository is mounted read-only"
        target = repo / mount["mountPath"][len(repo_in_pod) + 1 :]
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            data = config_maps[volume["configMap"]["name"]]["data"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[mount["subPath"]])
        else:
            assert "persistentVolumeClaim" in volume
            assert volume["persistentVolumeClaim"]["readOnly"] is True
            assert target.parent.name == Path(mount["subPath"]).parent.name
            affine_model(target / "model.onnx")
    return repo


def serve_like(deployment: dict[str, Any], repo: Path, log: Path) -> tuple[RunningServer, int]:
    """inferd started with the container's own arguments, on loopback and free ports."""
    args = list(container(deployment)["args"])
    assert args[0] == "serve"
    http_port, grpc_port = free_ports(2)
    replaced = {
        "--repo": str(repo),
        "--host": "127.0.0.1",
        "--port": str(http_port),
        "--grpc-port": str(grpc_port),
    }
    rest = args[1:]
    for flag, value in replaced.items():
        rest[rest.index(flag) + 1] = value
    port_flag = rest.index("--port")
    del rest[port_flag : port_flag + 2]  # start_server picks the HTTP port itself
    server = start_server(None, log, *rest)
    return server, grpc_port


def test_each_deployment_serves_its_version_with_the_probes_and_metric_it_names(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    adapter = yaml.safe_load((KUBE / "prometheus-adapter" / "values.yaml").read_text())
    (rule,) = adapter["rules"]["custom"]
    exposed = rule["name"]["as"]
    for overlay, objects in rendered.items():
        config_maps = {c["metadata"]["name"]: c for c in of_kind(objects, "ConfigMap")}
        hpa_metrics = {
            m["pods"]["metric"]["name"]
            for h in of_kind(objects, "HorizontalPodAutoscaler")
            for m in h["spec"]["metrics"]
        }
        assert hpa_metrics == {exposed}
        for deployment in of_kind(objects, "Deployment"):
            name = deployment["metadata"]["name"]
            root = tmp_path / overlay / name
            repo = lay_out_repository(deployment, config_maps, root)
            (model,) = [p.name for p in repo.iterdir()]
            (version,) = [p.name for p in (repo / model).iterdir() if p.is_dir()]
            expected = deployment["spec"]["template"]["metadata"]["labels"].get(
                "inferd.dev/model-version", version
            )
            assert version == expected
            server, _ = serve_like(deployment, repo, root / "server.log")
            try:
                main = container(deployment)
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    path = main[probe]["httpGet"]["path"]
                    assert httpx.get(server.url + path, timeout=5).status_code == 200, path
                body = {
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]
                }
                answer = httpx.post(
                    f"{server.url}/v2/models/{model}/versions/{version}/infer", json=body
                )
                assert answer.status_code == 200, answer.text
                metrics = httpx.get(server.url + "/metrics").text
                series = f'{exposed}{{model="{model}",version="{version}"}}'
                assert series in metrics, f"{series} is not exported"
                scrape_path = of_kind(objects, "ServiceMonitor")[0]["spec"]["endpoints"][0]["path"]
                assert httpx.get(server.url + scrape_path).status_code == 200
                # SIGTERM (after the preStop pause) drains within the grace period
                grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                started = time.monotonic()
                server.process.send_signal(signal.SIGTERM)
                assert server.process.wait(timeout=grace) == 0
                assert time.monotonic() - started < grace
            finally:
                if server.process.poll() is None:
                    server.stop()
