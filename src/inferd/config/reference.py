"""Renders the configuration reference (docs/configuration.md) from the typed settings.

`python -m inferd.config.reference > docs/configuration.md`; a test keeps the file in step.
"""

from __future__ import annotations

import typing

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from inferd.config.instances import InstanceGroup
from inferd.config.model import ModelConfig
from inferd.config.server_settings import ENV_PREFIX, ServerSettings


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(repr(a).replace("'", "") for a in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is tuple:
        return "list of " + _type_name(typing.get_args(annotation)[0])
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if isinstance(value, BaseModel):
        return "(see below)"
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]" if value else "[]"
    return f"`{value}`"


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    nested = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            nested.append((prefix + name + ".", annotation))
            rows.append(f"| `{prefix}{name}` | mapping | (see `{prefix}{name}.*`) | |")
            continue
        description = (field.description or "").replace("|", "\\|")
        rows.append(
            f"| `{prefix}{name}` | {_type_name(annotation)} | {_default(field)} | {description} |"
        )
    for nested_prefix, nested_model in nested:
        rows.extend(_rows(nested_model, nested_prefix))
    return rows


def render_reference() -> str:
    server_rows = []
    for name, field in ServerSettings.model_fields.items():
        description = (field.description or "").replace("|", "\\|")
        server_rows.append(
            f"| `{name}` | `--{name.replace('_', '-')}` | `{ENV_PREFIX}{name.upper()}` | "
            f"{_type_name(field.annotation)} | {_default(field)} | {description} |"
        )
    lines = [
        "# Configuration reference",
        "",
        "Generated from the typed settings by `python -m inferd.config.reference`; a test keeps "
        "this file in step with the code.",
        "",
        "## Server settings",
        "",
        "Each setting is a key of the YAML file given with `--config`, an environment variable, "
        "and a flag of `inferd serve`. Precedence: flag > environment > file > default. An "
        "unknown key or a wrong type is an error that names the file (or variable, or flag) "
        "and the key.",
        "",
        "| key | flag | environment | type | default | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
        *server_rows,
        "",
        "## Model settings (`<repository>/<model>/config.yaml`)",
        "",
        "Every key is optional; a model folder with only `1/model.onnx` serves with the defaults. "
        "Unknown keys are errors; a model with a bad config is reported and skipped, the others "
        "serve.",
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
        *_rows(ModelConfig),
        "",
        "`inputs` and `outputs` entries (overrides of what the ONNX file says):",
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
        *_rows(ModelConfig.model_fields["inputs"].annotation.__args__[0]),  # type: ignore[union-attr]
        "",
        "`instance_groups` entries (where instances run; each batch goes to the instance that "
        "would finish it first):",
        "",
        "| key | type | default | meaning |",
        "| --- | --- | --- | --- |",
        *_rows(InstanceGroup),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_reference(), end="")
