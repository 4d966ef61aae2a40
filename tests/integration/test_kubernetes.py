"""deploy/kubernetes: every overlay renders with `kubectl kustomize`, every rendered object
passes schema validation offline (built-in kinds with kubernetes-validate, strict; Gateway
API, Istio and Prometheus Operator resources with their CRDs' schemas through
tests/kubernetes/validate_crds.mjs), and what the manifests say of the server is what the
server does: each Deployment's arguments start a real inferd on a repository laid out as its
volume mounts lay it out, its probe paths answer on its named ports, its drain fits in its
termination grace period, and the metric the autoscaler reads is one the server exports. The
inference-gateway overlay: its InferencePool against the v1 API's fields (no package here
ships that CRD's schema), its pool, endpoint picker and route agree, and the gauges the picker
is told to read are ones a live server exports, with the model-server protocol's types.

No cluster here (and no endpoint picker: it is a Go program, and no Go module proxy is
reachable to build it): what a cluster would add (scheduling, the kubelet's probing, the
mesh) is not tested. The image itself is built and run as the Deployment runs it in
test_container.py."""

from __future__ import annotations

import copy
import json
import os
import re
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
from tests.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p for p in (KUBE / "overlays").iterdir() if p.is_dir())
VALIDATOR = ROOT / "tests" / "kubernetes" / "validate_crds.mjs"
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
"""The oldest Kubernetes the manifests support, and the newest the validator knows."""
BUILT_IN_GROUPS = {"v1", "apps/v1", "policy/v1", "autoscaling/v2", "rbac.authorization.k8s.io/v1"}
CRD_KINDS = {"HTTPRoute", "DestinationRule", "VirtualService", "ServiceMonitor"}
NO_SCHEMA_HERE = {"InferencePool"}
"""Custom resources whose CRD schema no package here ships: checked against their API's
fields instead (test_the_inference_pool_has_the_v1_api_fields)."""


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


def servers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Deployments that run inferd (not an overlay's endpoint picker)."""
    return [
        d
        for d in of_kind(objects, "Deployment")
        if [c["name"] for c in d["spec"]["template"]["spec"]["containers"]] == ["inferd"]
    ]


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
            if obj["kind"] in CRD_KINDS | NO_SCHEMA_HERE:
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
        for deployment in servers(objects):
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
            assert target in {d["metadata"]["name"] for d in servers(objects)}


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
        for deployment in servers(objects):
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


# -- the inference gateway -------------------------------------------------------------------

INFERENCE_POOL_V1 = {
    # the fields of inference.networking.k8s.io/v1 InferencePool's spec, as its API reference
    # gives them (no package here ships the CRD's own schema)
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "inference.networking.k8s.io/v1"},
        "kind": {"const": "InferencePool"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "targetPorts", "endpointPickerRef"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "targetPorts": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 8,
                    "items": {"$ref": "#/$defs/port"},
                },
                "endpointPickerRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "group": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "port": {"$ref": "#/$defs/port"},
                        "failureMode": {"enum": ["FailOpen", "FailClose"]},
                    },
                },
            },
        },
    },
    "$defs": {
        "port": {
            "type": "object",
            "additionalProperties": False,
            "required": ["number"],
            "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}},
        }
    },
}
PICKER_METRIC_FLAGS = (
    "--total-queued-requests-metric",
    "--total-running-requests-metric",
    "--kv-cache-usage-percentage-metric",
    "--lora-info-metric",
)


def test_the_inference_pool_has_the_v1_api_fields(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    import jsonschema

    (pool,) = of_kind(rendered["inference-gateway"], "InferencePool")
    jsonschema.validate(pool, INFERENCE_POOL_V1)
    typo = copy.deepcopy(pool)
    typo["spec"]["targetPortNumber"] = 8000  # the alpha API's field, gone in v1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(typo, INFERENCE_POOL_V1)


def test_the_pool_its_picker_and_the_route_agree(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["inference-gateway"]
    (pool,) = of_kind(objects, "InferencePool")
    (server,) = servers(objects)
    (picker,) = [d for d in of_kind(objects, "Deployment") if d not in servers(objects)]
    pod_labels = server["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"]: p["containerPort"] for p in container(server)["ports"]}
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [ports["http"]]
    args = container(picker)["args"]
    assert arg(args, "--pool-name") == pool["metadata"]["name"]
    assert arg(args, "--pool-namespace") == pool["metadata"]["namespace"]
    ref = pool["spec"]["endpointPickerRef"]
    (service,) = [s for s in of_kind(objects, "Service") if s["metadata"]["name"] == ref["name"]]
    picker_labels = picker["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= picker_labels.items()
    assert [p["port"] for p in service["spec"]["ports"]] == [ref["port"]["number"]]
    assert ref["port"]["number"] == int(arg(args, "--grpc-port"))
    # its configuration file: the ConfigMap mounted where --config-file points
    config_path = Path(arg(args, "--config-file"))
    (mount,) = [
        m for m in container(picker)["volumeMounts"] if m["mountPath"] == str(config_path.parent)
    ]
    volumes = {v["name"]: v for v in picker["spec"]["template"]["spec"]["volumes"]}
    config_map = volumes[mount["name"]]["configMap"]["name"]
    (data,) = [
        c["data"] for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"] == config_map
    ]
    config = yaml.safe_load(data[config_path.name])
    declared = {p.get("name", p["type"]) for p in config["plugins"]}
    assert {"queue-scorer", "kv-cache-utilization-scorer", "lora-affinity-scorer"} <= declared
    for profile in config["schedulingProfiles"]:
        assert {p["pluginRef"] for p in profile["plugins"]} <= declared
    # what it may read: the pool and its pods, as its service account
    (binding,) = of_kind(objects, "RoleBinding")
    assert [s["name"] for s in binding["subjects"]] == [
        picker["spec"]["template"]["spec"]["serviceAccountName"]
    ]
    (role,) = [
        r for r in of_kind(objects, "Role") if r["metadata"]["name"] == binding["roleRef"]["name"]
    ]
    granted = {
        (g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert {("inference.networking.k8s.io", "inferencepools"), ("", "pods")} <= granted
    # the gateway's route sends the OpenAI routes to the pool
    (route,) = of_kind(objects, "HTTPRoute")
    (backend,) = route["spec"]["rules"][0]["backendRefs"]
    assert (backend["group"], backend["kind"], backend["name"]) == (
        "inference.networking.k8s.io",
        "InferencePool",
        pool["metadata"]["name"],
    )


def test_the_picker_reads_families_the_server_exports(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    objects = rendered["inference-gateway"]
    (picker,) = [d for d in of_kind(objects, "Deployment") if d not in servers(objects)]
    args = container(picker)["args"]
    wanted = {flag: arg(args, flag) for flag in PICKER_METRIC_FLAGS}
    assert arg(args, "--cache-info-metric") == ""  # (off: inferd has no prefix-cache blocks)
    repo = tmp_path / "repo"
    affine_model(repo / "affine" / "1" / "model.onnx")
    server = start_server(repo, tmp_path / "server.log")
    try:
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
        assert httpx.post(f"{server.url}/v2/models/affine/infer", json=body).status_code == 200
        text = httpx.get(server.url + "/metrics").text  # the picker's default path
    finally:
        assert server.stop() == 0
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for flag, name in wanted.items():
        assert name in families, f"{flag} names {name}, which the server does not export"
        assert families[name].type == "gauge", flag
    (adapters,) = families[wanted["--lora-info-metric"]].samples
    assert adapters.labels["running_lora_adapters"] == "affine"
    assert adapters.labels["waiting_lora_adapters"] == ""
    assert int(adapters.labels["max_lora"]) >= 1


# -- OpenTelemetry ---------------------------------------------------------------------------


def test_the_opentelemetry_component_traces_the_server_it_is_added_to(tmp_path: Path) -> None:
    """`components/opentelemetry` added to an overlay: the variables it gives the inferd
    container, given to a real inferd (the collector's address replaced by a receiver's, the
    kubelet's expansion of `$(VAR)` done here), send its spans with the pod's attributes."""
    overlay = tmp_path / "traced"
    overlay.mkdir()
    to_kube = Path(os.path.relpath(KUBE, overlay))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(to_kube / "overlays" / "single")],
                "components": [str(to_kube / "components" / "opentelemetry")],
            }
        )
    )
    (server,) = servers(render(overlay))
    env: dict[str, str] = {}
    for variable in container(server)["env"]:
        if "valueFrom" in variable:  # the downward API: what the kubelet would fill in
            field = variable["valueFrom"]["fieldRef"]["fieldPath"]
            env[variable["name"]] = {
                "metadata.name": "inferd-7d9f-x2",
                "metadata.namespace": "inferd",
            }[field]
        else:
            env[variable["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: env[m.group(1)], variable["value"]
            )
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith(":4317")
    receiver = OtlpReceiver().start()
    repo = tmp_path / "repo"
    affine_model(repo / "affine" / "1" / "model.onnx")
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.grpc_endpoint
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    running = start_server(repo, tmp_path / "server.log", env=env)
    try:
        trace_id = "5b8efff798038103d269b633813fc60c"
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
        answer = httpx.post(
            f"{running.url}/v2/models/affine/infer",
            json=body,
            headers={"traceparent": f"00-{trace_id}-eee19b7ec3c1b174-01"},  # sampled: followed
        )
        assert answer.status_code == 200
        spans = receiver.wait_for(lambda found: any(s.trace_id == trace_id for s in found))
    finally:
        assert running.stop() == 0
        receiver.stop()
    (span,) = [
        s for s in spans if s.trace_id == trace_id and s.parent_span_id == "eee19b7ec3c1b174"
    ]
    assert span.service == "inferd"
    assert span.resource["k8s.pod.name"] == "inferd-7d9f-x2"
    assert span.resource["k8s.namespace.name"] == "inferd"
