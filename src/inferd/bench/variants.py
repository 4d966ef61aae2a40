"""Repository variants for tuning and comparison: a temporary repository holding one model of
the original (its files linked, not copied) with some config settings overridden."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

CONFIG = "config.yaml"


def parse_setting(text: str) -> tuple[str, Any]:
    """`key.sub=value` (the value read as YAML: 8, 2.5, true, [1, 3], {all: true})."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"setting '{text}': use key=value, dotted keys for sections")
    return key.strip(), yaml.safe_load(value)


def set_dotted(config: dict[str, Any], key: str, value: Any) -> None:
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"setting '{key}': '{part}' is not a section")
    node[parts[-1]] = value


def read_config(model_folder: Path) -> dict[str, Any]:
    path = model_folder / CONFIG
    data = yaml.safe_load(path.read_text()) if path.is_file() else {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def variant(repo: Path, model: str, settings: Mapping[str, Any]) -> Iterator[Path]:
    """A repository with only `model`, its config overridden by `settings`."""
    source = repo / model
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such model folder")
    root = Path(tempfile.mkdtemp(prefix="inferd-variant-"))
    try:
        target = root / model
        target.mkdir()
        for child in source.iterdir():
            if child.name != CONFIG:
                (target / child.name).symlink_to(child.resolve())
        config = read_config(source)
        for key, value in settings.items():
            set_dotted(config, key, value)
        (target / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_settings(repo: Path, model: str, settings: Mapping[str, Any]) -> Path:
    """Stores `settings` in the model's own config.yaml (other keys kept)."""
    config = read_config(repo / model)
    for key, value in settings.items():
        set_dotted(config, key, value)
    path = repo / model / CONFIG
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
