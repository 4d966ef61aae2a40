"""The tensors a version serves: what the ONNX file says, with the config's overrides applied."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.config.model import TensorOverride
from inferd.runtime.protocol import TensorSpec


class SpecError(ValueError):
    """The config's overrides do not fit the model file."""


def apply_overrides(
    specs: Sequence[TensorSpec],
    overrides: Sequence[TensorOverride],
    batched: bool,
    kind: str,
) -> tuple[TensorSpec, ...]:
    """Overridden specs; an override naming a tensor the file lacks is an error."""
    by_name = {o.name: o for o in overrides}
    unknown = sorted(set(by_name) - {s.name for s in specs})
    if unknown:
        raise SpecError(f"config names {kind} {unknown} that the model does not have")
    result = []
    for spec in specs:
        override = by_name.get(spec.name)
        if override is None:
            result.append(spec)
            continue
        datatype = override.datatype or spec.datatype
        shape, names = spec.shape, spec.dim_names
        if override.shape is not None:
            shape = ((-1,) if batched else ()) + tuple(override.shape)
            if len(shape) != spec.rank and spec.rank > 0:
                raise SpecError(
                    f"{kind[:-1]} '{spec.name}': config shape {list(override.shape)} has rank "
                    f"{len(override.shape)}, the model's is {spec.rank - (1 if batched else 0)}"
                )
            if len(names) != len(shape):
                names = (None,) * len(shape)
        result.append(TensorSpec(spec.name, datatype, shape, names))
    return tuple(result)


def check_batch_axis(specs: Sequence[TensorSpec], kind: str) -> None:
    """A batched model needs a variable first axis on every tensor."""
    for spec in specs:
        if spec.rank == 0 or spec.shape[0] != -1:
            raise SpecError(
                f"{kind[:-1]} '{spec.name}' has shape {list(spec.shape)} with no variable batch "
                "axis; set max_batch_size: 0 for a model without one"
            )


def served_shape(spec: TensorSpec, batched: bool) -> list[int]:
    """The shape without the batch axis, as Triton's model config shows `dims`."""
    return list(spec.shape[1:] if batched else spec.shape)
