"""Scanning `<repo>/<model>/config.yaml` and `<repo>/<model>/<N>/model.onnx`, or a repository
of one model: `<repo>/model.onnx` (with its `config.yaml` and tokenizer files beside it), as
KServe's storage initializer lays a model out in `/mnt/models`; that model is version 1, named
by `model_name` (which wins over its config's `name`), else its config's `name`, else `model`.

A problem with one model or one version is recorded on its entry and never stops the scan: the
caller reports it and serves the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inferd.config.model import ModelConfig
from inferd.config.yamlfile import read_yaml_mapping, validate_mapping
from inferd.errors import ConfigError

MODEL_FILE = "model.onnx"
CONFIG_FILE = "config.yaml"
ONE_MODEL_NAME = "model"
"""The name of a repository of one model's model when neither the server nor its config
names it."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def valid_name(name: str) -> bool:
    """Model names are plain folder names: no separators, no '..', no hidden files."""
    return bool(_NAME.match(name)) and ".." not in name


@dataclass(frozen=True)
class VersionEntry:
    version: int
    path: Path
    error: str | None = None


@dataclass(frozen=True)
class ModelEntry:
    name: str
    folder: Path
    config: ModelConfig | None
    versions: tuple[VersionEntry, ...]
    """The versions the policy selects, ascending; each may carry an error."""
    error: str | None = None
    """Why the model as a whole cannot load (bad config, no versions)."""
    skipped: tuple[VersionEntry, ...] = ()
    """Version folders that cannot be a version (no model file); the policy never sees them."""
    available: tuple[VersionEntry, ...] = ()
    """Every version with a model file, ascending, selected or not (fallbacks for `latest`)."""


def one_model(folder: Path) -> bool:
    """Whether `folder` is a repository of one model (its model file at the top)."""
    return (folder / MODEL_FILE).is_file()


def _version_entries(folder: Path) -> list[VersionEntry]:
    if one_model(folder):
        return [VersionEntry(1, folder / MODEL_FILE)]
    found = []
    for child in folder.iterdir():
        if not child.is_dir() or not (child.name.isascii() and child.name.isdigit()):
            continue
        version = int(child.name)
        model_file = child / MODEL_FILE
        if version < 1:
            found.append(VersionEntry(version, model_file, "version numbers start at 1"))
        elif not model_file.is_file():
            found.append(VersionEntry(version, model_file, f"no {MODEL_FILE} in {child.name}/"))
        else:
            found.append(VersionEntry(version, model_file))
    return found


def scan_model(folder: Path, name: str | None = None) -> ModelEntry:
    """One model folder (or a repository of one model, named `name`, else by its config, else
    ONE_MODEL_NAME); problems are recorded on the entry, never raised."""
    alone = one_model(folder)
    name = name or (None if alone else folder.name)
    config_path = folder / CONFIG_FILE
    try:
        # named by their place in the repository: these reasons reach unauthenticated /ready
        shown = CONFIG_FILE if alone else f"{name}/{CONFIG_FILE}"
        raw = read_yaml_mapping(config_path, shown) if config_path.exists() else {}
        config = validate_mapping(ModelConfig, raw, shown)
    except ConfigError as exc:
        return ModelEntry(name or ONE_MODEL_NAME, folder, None, (), error=str(exc))
    if name is None:
        name = config.name or ONE_MODEL_NAME
    if config.name is not None and config.name != name and not alone:
        # (a repository of one model is named by the server: KServe's InferenceService name)
        return ModelEntry(
            name,
            folder,
            config,
            (),
            error=f"{shown}: name '{config.name}' differs from the folder name",
        )
    if not config.needs_versions:
        return ModelEntry(name, folder, config, ())
    entries = _version_entries(folder)
    if not entries:
        return ModelEntry(
            name, folder, config, (), error=f"no numeric version folder with {MODEL_FILE}"
        )
    skipped = tuple(sorted((e for e in entries if e.error), key=lambda e: e.version))
    by_version = {e.version: e for e in entries if e.error is None}
    if not by_version:
        return ModelEntry(
            name,
            folder,
            config,
            (),
            error=f"no version folder holds a {MODEL_FILE}",
            skipped=skipped,
        )
    selected = config.version_policy.select(list(by_version))
    if not selected:
        return ModelEntry(
            name,
            folder,
            config,
            (),
            error=f"the version policy selects none of the versions {sorted(by_version)}",
            skipped=skipped,
        )
    return ModelEntry(
        name,
        folder,
        config,
        tuple(by_version[v] for v in selected),
        skipped=skipped,
        available=tuple(by_version[v] for v in sorted(by_version)),
    )


def task_defaults(entries: Sequence[ModelEntry]) -> dict[str, str]:
    """Purpose ("embed", "predict", "generate") -> the model marked `default: true` for it.
    Raises ConfigError when two models claim one purpose."""
    chosen: dict[str, str] = {}
    for entry in entries:
        config = entry.config
        if config is None or not config.default or config.purpose is None:
            continue
        other = chosen.setdefault(config.purpose, entry.name)
        if other != entry.name:
            raise ConfigError(
                f"two models are the default of /{config.purpose}: '{other}' and '{entry.name}' "
                "(default: true in both config.yaml files; keep one)"
            )
    return chosen


def scan_repository(root: Path, model_name: str | None = None) -> list[ModelEntry]:
    """Every model folder under `root`, sorted by name, or the model of a repository of one
    model (named `model_name`). Raises ConfigError if `root` is unusable, `model_name` is not a
    valid name, or two models claim to be the default of one task."""
    if not root.is_dir():
        raise ConfigError(f"model repository {root} is not a folder")
    if model_name is not None and not valid_name(model_name):
        raise ConfigError(f"model_name '{model_name}' is not a valid model name")
    if one_model(root):
        return [scan_model(root, model_name)]
    models = []
    for folder in sorted(root.iterdir()):
        if not folder.is_dir() or folder.name.startswith((".", "_")):
            continue
        if not valid_name(folder.name):
            models.append(ModelEntry(folder.name, folder, None, (), error="not a valid model name"))
            continue
        models.append(scan_model(folder))
    task_defaults(models)
    return models
