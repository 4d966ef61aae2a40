"""Choosing the model output a task reads."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.runtime.protocol import TensorSpec


def task_output(outputs: Sequence[TensorSpec], name: str | None, setting: str) -> TensorSpec:
    """The output named by the config (`setting` names the key, for the error), else the first."""
    names = [o.name for o in outputs]
    chosen = name or names[0]
    for spec in outputs:
        if spec.name == chosen:
            return spec
    raise ValueError(f"{setting} '{chosen}' is not an output of the model {names}")
