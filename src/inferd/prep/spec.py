"""Input specs for exporting a `torch.nn.Module`: names, shapes with named dynamic axes, dtypes.

On the command line: `--input NAME:DIMS:DTYPE[:LOW,HIGH]`, DIMS comma-separated, each an integer
or a name (a dynamic axis), e.g. `--input input_ids:batch,sequence:int64:0,1000`. In a YAML file:

    inputs:
      - {name: input_ids, shape: [batch, sequence], dtype: int64, range: [0, 1000]}
    outputs: [logits]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferd.config.yamlfile import read_yaml_mapping

DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "float64": np.float64,
    "int64": np.int64,
    "int32": np.int32,
    "bool": np.bool_,
}

BATCH_AXIS = "batch"


class SpecError(ValueError):
    """An input spec that cannot be used; the message says which part and why."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int | str, ...]
    dtype: str
    low: float = 0.0
    high: float = 1.0
    """Values are drawn from [low, high): token ids need `high` = the vocabulary size."""

    @property
    def dynamic_axes(self) -> dict[int, str]:
        return {i: d for i, d in enumerate(self.shape) if isinstance(d, str)}

    def sample(self, sizes: dict[str, int], rng: np.random.Generator) -> np.ndarray:
        """A random tensor of this spec, the dynamic axes sized by `sizes` (by axis name)."""
        shape = tuple(d if isinstance(d, int) else sizes[d] for d in self.shape)
        dtype = DTYPES[self.dtype]
        if np.issubdtype(dtype, np.integer):
            high = max(int(self.high), int(self.low) + 1)
            return rng.integers(int(self.low), high, shape).astype(dtype)
        if dtype is np.bool_:
            return rng.random(shape) < 0.5
        return rng.uniform(self.low, self.high, shape).astype(dtype)


@dataclass(frozen=True)
class ModuleSpec:
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...] = ()
    output_axes: dict[str, dict[int, str]] = field(default_factory=dict)

    @property
    def axis_names(self) -> list[str]:
        names: list[str] = []
        for spec in self.inputs:
            names.extend(n for n in spec.dynamic_axes.values() if n not in names)
        return names


def _dim(text: str, where: str) -> int | str:
    text = text.strip()
    if not text:
        raise SpecError(f"{where}: an empty dimension")
    if text.isascii() and text.isdigit():
        if int(text) < 1:
            raise SpecError(f"{where}: dimension {text} must be at least 1")
        return int(text)
    if not text.replace("_", "").isalnum():
        raise SpecError(f"{where}: dimension '{text}' is neither an integer nor a name")
    return text


def _make(
    name: str, dims: list[Any], dtype: str, bounds: list[Any] | None, where: str
) -> InputSpec:
    if not name:
        raise SpecError(f"{where}: the input has no name")
    if dtype not in DTYPES:
        raise SpecError(f"{where}: dtype '{dtype}' is not one of {', '.join(DTYPES)}")
    if not dims:
        raise SpecError(f"{where}: the input has no shape")
    shape = tuple(_dim(str(d), where) for d in dims)
    low, high = (0.0, 1.0) if not bounds else (float(bounds[0]), float(bounds[1]))
    if high <= low:
        raise SpecError(f"{where}: range [{low}, {high}) is empty")
    return InputSpec(name, shape, dtype, low, high)


def parse_input(text: str) -> InputSpec:
    """`NAME:DIMS:DTYPE[:LOW,HIGH]` -> an InputSpec (SpecError naming the part otherwise)."""
    where = f"--input '{text}'"
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise SpecError(f"{where}: expected NAME:DIMS:DTYPE[:LOW,HIGH]")
    bounds = parts[3].split(",") if len(parts) == 4 else None
    if bounds is not None and len(bounds) != 2:
        raise SpecError(f"{where}: the range is LOW,HIGH")
    try:
        return _make(parts[0].strip(), parts[1].split(","), parts[2].strip(), bounds, where)
    except ValueError as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"{where}: {exc}") from exc


def load_spec_file(path: Path) -> ModuleSpec:
    data = read_yaml_mapping(path)
    raw_inputs = data.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise SpecError(f"{path}: 'inputs' must be a non-empty list")
    inputs = []
    for i, item in enumerate(raw_inputs):
        where = f"{path}: inputs[{i}]"
        if not isinstance(item, dict):
            raise SpecError(f"{where}: expected a mapping with name, shape, dtype")
        bounds = item.get("range")
        if bounds is not None and (not isinstance(bounds, list) or len(bounds) != 2):
            raise SpecError(f"{where}: range must be [low, high]")
        shape = item.get("shape")
        if not isinstance(shape, list):
            raise SpecError(f"{where}: shape must be a list")
        name, dtype = str(item.get("name", "")), str(item.get("dtype", "float32"))
        inputs.append(_make(name, shape, dtype, bounds, where))
    outputs = data.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise SpecError(f"{path}: 'outputs' must be a list of names")
    return ModuleSpec(tuple(inputs), tuple(outputs))
