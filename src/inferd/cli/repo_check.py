"""`inferd repo check DIR`: per model and version, what would load, or why it would not."""

from __future__ import annotations

import sys
from pathlib import Path

from inferd.config.model import ModelConfig, RuntimeOptions
from inferd.config.text_sections import ZeroShotConfig
from inferd.engine.rollout import ServingPolicy
from inferd.engine.versions.loading import load_instances
from inferd.repository.scan import ModelEntry, scan_repository
from inferd.runtime.onnx_session import OnnxSession
from inferd.runtime.placement import one_instance, placements
from inferd.runtime.protocol import Runtime, TensorSpec


def _tensors(label: str, specs: tuple[TensorSpec, ...]) -> list[str]:
    lines = []
    for spec in specs:
        lines.append(f"      {label} {spec.name}: {spec.datatype} {list(spec.shape)}")
    return lines


def check_repository(root: Path, load: bool = True) -> int:
    """Prints a report; returns 0 when everything would load, 1 otherwise. The versions are
    those the server would serve: the version policy, then the rollouts' records (a
    rolled-back version is named as withdrawn; an unreadable record is a problem)."""
    policy = ServingPolicy.for_repository(root)
    entries = [policy.select(entry) for entry in scan_repository(root)]
    problems = 0
    out: list[str] = [f"repository {root}"]
    for name, unreadable in sorted(policy.unreadable_all().items()):
        out.append(f"  {name}: ROLLOUT STATE UNREADABLE: {unreadable.path}: {unreadable.reason}")
        problems += 1
    if not entries:
        out.append("  (no model folders)")
        problems += 1
    for entry in entries:
        if entry.error or entry.config is None:
            out.append(f"  {entry.name}: NOT LOADABLE: {entry.error}")
            problems += 1
            continue
        config = entry.config
        if config.zero_shot is not None:
            problems += _check_zero_shot(entry.name, config.zero_shot, entries, out)
            continue
        out.append(
            f"  {entry.name}: task={config.task} max_batch_size={config.max_batch_size} "
            f"instances={', '.join(p.name for p in placements(config))}"
        )
        for skipped in entry.skipped:
            out.append(f"    version {skipped.version}: SKIPPED: {skipped.error}")
            problems += 1
        for withdrawn in policy.withdrawn(entry.name):
            out.append(
                f"    version {withdrawn}: WITHDRAWN: rolled back or aborted; out of traffic "
                "until a new rollout names it"
            )
        for version in entry.versions:
            problems += _check_version(config, version.version, version.path, load, out)
    out.append("all models would load" if problems == 0 else f"{problems} problem(s) found")
    print("\n".join(out), file=sys.stdout)
    return 0 if problems == 0 else 1


def _check_zero_shot(
    name: str, zero_shot: ZeroShotConfig, entries: list[ModelEntry], out: list[str]
) -> int:
    """A zero-shot model's line: its base and labels, or why it would not load (1 problem)."""
    base = zero_shot.base_model
    known = {e.name: e.config for e in entries}
    base_config = known.get(base)
    if base_config is None or "embed" not in base_config.kind.verbs:
        out.append(f"  {name}: NOT LOADABLE: base model '{base}' is not an embedding model here")
        return 1
    labels = ", ".join(label.name for label in zero_shot.labels)
    out.append(f"  {name}: zero-shot over '{base}': {labels}")
    return 0


def _check_version(
    config: ModelConfig, version: int, path: Path, load: bool, out: list[str]
) -> int:
    """A version's lines: found (`load` off), or loaded and warmed up with its tensors, or why
    it fails (1 problem)."""
    if not load:
        out.append(f"    version {version}: found {path.name}")
        return 0

    def factory(options: RuntimeOptions) -> Runtime:
        return OnnxSession(path, options)

    try:
        loaded = load_instances(one_instance(config), factory, path.parent)
    except Exception as exc:
        out.append(f"    version {version}: FAILS: {exc}")
        return 1
    out.append(
        f"    version {version}: OK (loaded and warmed up in "
        f"{loaded.load_s * 1000:.0f} ms on {', '.join(loaded.pool.first.providers)})"
    )
    out.extend(_tensors("input ", loaded.inputs))
    out.extend(_tensors("output", loaded.outputs))
    loaded.pool.close()
    return 0
