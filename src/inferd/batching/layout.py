"""How a model's tensors batch: which axes are padded, and which output axes follow them.

Derived once per version from its tensor specs and pad values; a pure description used by
batch formation, padding and slicing back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferd.runtime.protocol import TensorSpec


@dataclass(frozen=True)
class UnpadRule:
    """Output `output_axis` has, for each item, the length of `input_name`'s `input_axis`."""

    output_axis: int
    input_name: str
    input_axis: int


@dataclass(frozen=True)
class BatchLayout:
    batched: bool
    """Axis 0 of every input and output is the batch axis."""
    padded_axes: Mapping[str, tuple[int, ...]]
    """Input name -> the variable axes that are padded (never axis 0)."""
    pad_values: Mapping[str, float]
    unpad: Mapping[str, tuple[UnpadRule, ...]]
    """Output name -> how to cut its padded axes back for each item."""
    mix_lengths: bool
    """Items of different lengths may share a batch: every padded output axis can be cut back."""
    pad_left: bool = False
    """Padding goes before the values (decoders) instead of after them."""

    @property
    def pads(self) -> bool:
        return bool(self.padded_axes)


def build_layout(
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    pad_values: Mapping[str, float],
    batched: bool,
    pad_left: bool = False,
) -> BatchLayout:
    """Links output axes to padded input axes through their symbolic dimension names.

    When an output has a variable axis (other than the batch axis) that no padded input axis
    names, padding would leak into that output, so items of different lengths are kept apart.
    """
    first = 1 if batched else 0
    padded: dict[str, tuple[int, ...]] = {}
    by_dim_name: dict[str, tuple[str, int]] = {}
    for spec in inputs:
        if spec.name not in pad_values:
            continue
        axes = tuple(a for a in range(first, spec.rank) if spec.shape[a] == -1)
        if not axes:
            continue
        padded[spec.name] = axes
        for axis in axes:
            dim_name = spec.dim_names[axis]
            if dim_name is not None:
                by_dim_name.setdefault(dim_name, (spec.name, axis))

    unpad: dict[str, tuple[UnpadRule, ...]] = {}
    mix = batched and bool(padded)
    for spec in outputs:
        rules = []
        for axis in range(first, spec.rank):
            if spec.shape[axis] != -1:
                continue
            dim_name = spec.dim_names[axis]
            if dim_name is not None and dim_name in by_dim_name:
                name, in_axis = by_dim_name[dim_name]
                rules.append(UnpadRule(axis, name, in_axis))
            else:
                mix = False
        if rules:
            unpad[spec.name] = tuple(rules)
    return BatchLayout(
        batched=batched,
        padded_axes=padded,
        pad_values={k: float(v) for k, v in pad_values.items() if k in padded},
        unpad=unpad,
        mix_lengths=mix,
        pad_left=pad_left,
    )
