"""Reading a YAML config file into a mapping, and naming the file and key when it is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from inferd.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def read_yaml_mapping(path: Path, shown_as: str | None = None) -> dict[str, Any]:
    """The top-level mapping of a YAML file; an empty file is an empty mapping. Errors name the
    file as `shown_as` (default: its path) and the line and column, never the file's text."""
    name = shown_as or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{name}: cannot read: {reason or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML{_where(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: the top level must be a mapping, not {type(data).__name__}")
    return data


def _where(exc: yaml.YAMLError) -> str:
    """' at line L, column C: what the parser expected' (its snippet of the text left out)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return at + (f": {problem}" if problem else "")


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
