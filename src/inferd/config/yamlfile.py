"""Reading a YAML config file into a mapping, and naming the file and key when it is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from inferd.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file; an empty file is an empty mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, not {type(data).__name__}")
    return data


def describe_validation_error(source: str, exc: ValidationError) -> str:
    """One line per problem, each naming the source and the dotted key."""
    lines = []
    for err in exc.errors():
        key = ".".join(str(part) for part in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        else:
            lines.append(f"{source}: key '{key}': {err['msg']}")
    return "\n".join(lines)


def validate_mapping(model: type[M], data: dict[str, Any], source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(source, exc)) from exc
