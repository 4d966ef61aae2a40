"""Where preparation results go: the next version folder of a model in a repository.

A version is written to a staging folder and renamed into place at the end, so a failed or
interrupted step never leaves a half-written version that the server would try to load. An
existing version is never overwritten.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from inferd.repository.scan import CONFIG_FILE, MODEL_FILE, valid_name

HIDDEN = ".inferd"  # the server skips folders that start with a dot


class TargetError(ValueError):
    """A repository, model or version that cannot be written or read."""


def model_folder(repo: Path, model: str) -> Path:
    if not valid_name(model):
        raise TargetError(f"'{model}' is not a valid model name (letters, digits, '-', '_', '.')")
    return repo / model


def versions(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(
        int(c.name)
        for c in folder.iterdir()
        if c.is_dir() and c.name.isascii() and c.name.isdigit()
    )


def next_version(folder: Path, wanted: int | None) -> int:
    existing = versions(folder)
    if wanted is None:
        return (existing[-1] + 1) if existing else 1
    if wanted < 1:
        raise TargetError("version numbers start at 1")
    if wanted in existing:
        raise TargetError(
            f"{folder / str(wanted)} already exists; inferd never overwrites a version "
            "(choose another --version or remove it yourself)"
        )
    return wanted


def source_version(folder: Path, wanted: int | None) -> tuple[int, Path]:
    """The version a step starts from: `wanted`, or the highest with a model file."""
    usable = [v for v in versions(folder) if (folder / str(v) / MODEL_FILE).is_file()]
    if not usable:
        raise TargetError(f"{folder}: no version with a {MODEL_FILE} to start from")
    version = usable[-1] if wanted is None else wanted
    if version not in usable:
        raise TargetError(f"{folder}: version {version} has no {MODEL_FILE}")
    return version, folder / str(version) / MODEL_FILE


def staging(folder: Path, version: int) -> Path:
    """A scratch folder outside the model folder: the server never sees a half-built version
    (nor a new model folder without a version when a step fails)."""
    stage = folder.parent / HIDDEN / "staging" / f"{folder.name}-{version}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    return stage


def publish(stage: Path, folder: Path, version: int) -> Path:
    target = folder / str(version)
    if target.exists():
        shutil.rmtree(stage, ignore_errors=True)
        raise TargetError(f"{target} appeared while this step ran; not overwritten")
    folder.mkdir(parents=True, exist_ok=True)
    stage.rename(target)
    return target


def copy_beside(files: list[Path], stage: Path) -> list[str]:
    copied = []
    for f in files:
        if f.is_file():
            shutil.copy2(f, stage / f.name)
            copied.append(f.name)
    return copied


def write_config_if_missing(folder: Path, config: dict[str, Any]) -> bool:
    path = folder / CONFIG_FILE
    if path.exists():
        return False
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return True


def write_report(folder: Path, name: str, report: dict[str, Any]) -> Path:
    """Reports live under `<repo>/.inferd/reports/<model>/`, kept whether the step passed or not."""
    target = folder.parent / HIDDEN / "reports" / folder.name / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return target
