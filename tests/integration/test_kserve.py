"""deploy/kserve: the ClusterServingRuntime, the ServingRuntime and the example
InferenceService hold to KServe's resource schemas (its SDK's models, offline:
tests/kserve_schema.py), agree with each other, and the runtime's container, started as KServe
starts it on a folder laid out as KServe's storage initializer lays out /mnt/models, serves the
InferenceService's model by its name over KServe V2, the task routes and the OpenAI routes.

No cluster, no KServe controller, no storage initializer here: what they add (the predictor's
Knative or raw Deployment, the download from storageUri, the ingress) is not run."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.server import start_server
from tests.kserve_schema import models, validate

KSERVE = Path(__file__).resolve().parents[2] / "deploy" / "kserve"


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((KSERVE / name).read_text())
    return document


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    return models()


def test_the_runtimes_and_the_inference_service_hold_to_kserves_schemas(
    schemas: dict[str, Any],
) -> None:
    for name in ("clusterservingruntime.yaml", "servingruntime.yaml", "inferenceservice.yaml"):
        assert validate(load(name), schemas) == [], name
    typo = copy.deepcopy(load("inferenceservice.yaml"))
    typo["spec"]["predictor"]["model"]["storageURI"] = typo["spec"]["predictor"]["model"].pop(
        "storageUri"
    )
    assert validate(typo, schemas) == [
        "InferenceService.spec.predictor.model: unknown field 'storageURI'"
    ]
    bad = copy.deepcopy(load("clusterservingruntime.yaml"))
    bad["spec"]["containers"][0]["imagePullPolicyy"] = "Always"  # Kubernetes' own fields too
    assert validate(bad, schemas)
    missing = copy.deepcopy(bad)
    del missing["spec"]["containers"]
    assert "ClusterServingRuntime.spec: 'containers' is required" in validate(missing, schemas)


def test_the_inference_service_selects_the_runtime_and_the_two_runtimes_agree() -> None:
    cluster, namespaced = load("clusterservingruntime.yaml"), load("servingruntime.yaml")
    assert cluster["spec"] == namespaced["spec"]
    assert cluster["metadata"]["name"] == namespaced["metadata"]["name"]
    model = load("inferenceservice.yaml")["spec"]["predictor"]["model"]
    assert model["runtime"] == cluster["metadata"]["name"]
    formats = {f["name"] for f in cluster["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats
    (container,) = cluster["spec"]["containers"]
    assert container["name"] == "kserve-container"  # the name KServe's webhooks look for
    (port,) = container["ports"]
    annotations = cluster["spec"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == port["containerPort"]
    assert container["readinessProbe"]["httpGet"]["port"] == port["containerPort"]


def lay_out_mnt_models(root: Path) -> Path:
    """/mnt/models as the storage initializer leaves it for a storageUri folder that holds
    the demo's MiniLM: model.onnx, tokenizer.json and config.yaml, at the top."""
    from inferd.tools.demo import build_demo

    demo = build_demo(root / "demo")
    mnt = root / "mnt-models"
    mnt.mkdir()
    for source in (demo / "minilm" / "1").iterdir():
        shutil.copy(source, mnt / source.name)
    shutil.copy(demo / "minilm" / "config.yaml", mnt / "config.yaml")
    return mnt


def test_the_runtime_serves_the_storage_initializers_layout_by_the_services_name(
    tmp_path: Path,
) -> None:
    runtime = load("clusterservingruntime.yaml")
    service = load("inferenceservice.yaml")
    name = service["metadata"]["name"]
    (container,) = runtime["spec"]["containers"]
    mnt = lay_out_mnt_models(tmp_path)
    # the container's arguments as KServe renders them: {{.Name}} is the InferenceService's
    args = [a.replace("{{.Name}}", name) for a in container["args"]]
    assert args[0] == "serve" and args[args.index("--repo") + 1] == "/mnt/models"
    args[args.index("--repo") + 1] = str(mnt)
    args[args.index("--host") + 1] = "127.0.0.1"
    port_at = args.index("--port")
    del args[port_at : port_at + 2]  # start_server picks a free port
    keys = tmp_path / "admin.keys"
    keys.write_text("admin-key\n")
    server = start_server(None, tmp_path / "server.log", *args[1:], "--admin-keys-file", str(keys))
    try:
        probe = container["readinessProbe"]["httpGet"]["path"]
        assert httpx.get(server.url + probe, timeout=10).status_code == 200
        metadata = httpx.get(f"{server.url}/v2/models/{name}", timeout=10)
        assert metadata.status_code == 200, metadata.text
        assert metadata.json()["name"] == name and metadata.json()["versions"] == ["1"]
        assert httpx.get(f"{server.url}/v2/models/{name}/ready").status_code == 200
        embedded = httpx.post(
            server.url + "/v1/embeddings", json={"model": name, "input": "hello"}, timeout=30
        )
        assert embedded.status_code == 200, embedded.text
        assert len(embedded.json()["data"][0]["embedding"]) == 384
        task = httpx.post(server.url + "/embed", json={"model": name, "texts": ["hi"]}, timeout=30)
        assert task.status_code == 200, task.text
        # an admin's unload and load find the one model at the top of /mnt/models again
        admin = {"Authorization": "Bearer admin-key"}
        for action in ("unload", "load"):
            done = httpx.post(
                f"{server.url}/v2/repository/models/{name}/{action}", headers=admin, timeout=60
            )
            assert done.status_code == 200, (action, done.text)
        assert httpx.get(f"{server.url}/v2/models/{name}/ready").status_code == 200
        path = runtime["spec"]["annotations"]["prometheus.kserve.io/path"]
        assert (
            f'inferd_model_ready{{model="{name}",version="1"}} 1.0'
            in httpx.get(server.url + path).text
        )
    finally:
        assert server.stop() == 0
