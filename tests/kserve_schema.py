"""KServe's resource schemas, offline: the field maps of KServe's own Python SDK (its models are
generated from the OpenAPI of KServe's CRDs), read from the SDK's wheel without importing it
(the SDK pulls in a server's worth of dependencies), and a validator that holds a manifest to
them: every field known, of its type, the required ones present. Kubernetes' own types inside
them (a container, its resources) are validated strictly with kubernetes-validate.

scripts/test.sh downloads the wheel (KSERVE_WHEEL) into .cache/kserve."""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".cache" / "kserve"
KSERVE_VERSION = "0.21.0"
KUBERNETES_VERSION = "1.29.0"
_REQUIRED = re.compile(r"Invalid value for `(\w+)`, must not be `None`")
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")
_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "object": (object,),
}


@dataclass(frozen=True)
class Model:
    fields: dict[str, str]
    """JSON name -> the SDK's type name."""
    required: frozenset[str]
    """JSON names."""


def wheel() -> Path:
    found = sorted(WHEELS.glob(f"kserve-{KSERVE_VERSION}-*.whl"))
    assert found, (
        f"KServe's SDK wheel {KSERVE_VERSION} is not in {WHEELS}: scripts/test.sh downloads it "
        f'(pip download --no-deps "kserve=={KSERVE_VERSION}" -d {WHEELS})'
    )
    return found[-1]


def models() -> dict[str, Model]:
    """Each SDK model class by name (V1alpha1ServingRuntimeSpec, ...) with its fields."""
    found: dict[str, Model] = {}
    with zipfile.ZipFile(wheel()) as archive:
        for name in archive.namelist():
            if not (name.startswith("kserve/models/v1") and name.endswith(".py")):
                continue
            source = archive.read(name).decode()
            for node in ast.parse(source).body:
                if isinstance(node, ast.ClassDef):
                    found[node.name] = _model(node, source)
    return found


def _model(node: ast.ClassDef, source: str) -> Model:
    tables: dict[str, dict[str, str]] = {}
    for statement in node.body:
        if (
            isinstance(statement, ast.Assign)
            and isinstance(statement.targets[0], ast.Name)
            and statement.targets[0].id in ("openapi_types", "attribute_map")
        ):
            tables[statement.targets[0].id] = ast.literal_eval(statement.value)
    types, names = tables["openapi_types"], tables["attribute_map"]
    required = {names[attr] for attr in _REQUIRED.findall(source) if attr in names}
    return Model({names[attr]: kind for attr, kind in types.items()}, frozenset(required))


def problems(obj: Any, kind: str, schemas: dict[str, Model], at: str = "") -> list[str]:
    """What in `obj` does not hold to the SDK's `kind` (a class name or a type expression)."""
    if (inner := _LIST.match(kind)) is not None:
        if not isinstance(obj, list):
            return [f"{at}: a list expected"]
        return [
            p for i, item in enumerate(obj) for p in problems(item, inner[1], schemas, f"{at}[{i}]")
        ]
    if (inner := _DICT.match(kind)) is not None:
        if not isinstance(obj, dict):
            return [f"{at}: a mapping expected"]
        return [p for k, v in obj.items() for p in problems(v, inner[1], schemas, f"{at}.{k}")]
    if kind in _SCALARS:
        ok = isinstance(obj, _SCALARS[kind]) and not (kind != "bool" and isinstance(obj, bool))
        return [] if ok else [f"{at}: {kind} expected, not {type(obj).__name__}"]
    if kind in schemas:
        return _object_problems(obj, schemas[kind], schemas, at)
    return _kubernetes_problems(obj, kind, at)


def _object_problems(obj: Any, model: Model, schemas: dict[str, Model], at: str) -> list[str]:
    if not isinstance(obj, dict):
        return [f"{at}: a mapping expected"]
    found = [f"{at}: '{name}' is required" for name in sorted(model.required - set(obj))]
    for name, value in obj.items():
        if name not in model.fields:
            found.append(f"{at}: unknown field '{name}'")
        else:
            found += problems(value, model.fields[name], schemas, f"{at}.{name}")
    return found


def _kubernetes_problems(obj: Any, kind: str, at: str) -> list[str]:
    """Kubernetes' own types, checked inside a Pod (strict: no unknown field)."""
    if kind == "V1Container":
        container = obj
    elif kind == "V1ResourceRequirements":
        container = {"name": "c", "image": "i", "resources": obj}
    elif kind == "V1ObjectMeta":
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": obj, "spec": {"containers": []}}
        return _validated(pod, at)
    else:
        return [f"{at}: {kind} is not checked here (add it to kserve_schema)"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [container]},
    }
    return _validated(pod, at)


def _validated(pod: dict[str, Any], at: str) -> list[str]:
    try:
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{at}: {exc.message}"]
    return []


KINDS = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "V1alpha1ClusterServingRuntime",
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
}


def validate(obj: dict[str, Any], schemas: dict[str, Model]) -> list[str]:
    """A KServe resource's problems against its SDK model (none: it holds)."""
    kind = KINDS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if kind is None:
        return [f"not a KServe resource inferd ships: {obj.get('apiVersion')} {obj.get('kind')}"]
    return problems(obj, kind, schemas, obj["kind"])
