"""The alert rules and the dashboard: valid, tested with promtool, and naming only metrics that
inferd really exposes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "inferd-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "inferd-dashboard.json"
GPU_ONLY = {
    "inferd_gpu_utilization_ratio",
    "inferd_gpu_memory_used_bytes",
    "inferd_gpu_memory_total_bytes",
}
NAME = re.compile(r"\b((?:inferd|process)_[a-z_]+)")
SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is needed: apt-get install prometheus (.ci/run installs it)"
    return path


def test_rules_pass_promtool_check_and_unit_tests() -> None:
    check = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        [promtool(), "test", "rules", "inferd-alerts.test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def expressions() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"] and all(p["targets"] for p in dashboard["panels"])
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    return exprs


def base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def test_every_metric_in_rules_and_dashboard_is_exposed(client: httpx.Client) -> None:
    client.post(
        "/v2/models/affine/infer",
        json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
    )
    exposed = {base(m) for m in NAME.findall(client.get("/metrics").text)}
    # families this repository's models cannot produce (texts, GPUs) come from the text server
    text_only = {
        "inferd_drift_psi",
        "inferd_top_confidence",
        "inferd_input_length_tokens",
        "inferd_predicted_labels",
    }
    wanted = {base(m) for expr in expressions() for m in NAME.findall(expr)}
    missing = wanted - exposed - GPU_ONLY - text_only
    assert not missing, f"named in deploy/ but not exposed: {sorted(missing)}"
    assert wanted & GPU_ONLY  # the GPU panels and alerts exist
    observability = DEPLOY.parent / "src" / "inferd" / "observability"
    defined = "".join(path.read_text() for path in observability.glob("*.py"))
    for name in wanted & (GPU_ONLY | text_only):
        assert f'"{name}"' in defined, name
