"""The narrow runtime interface: tensor specs and `run(feeds) -> outputs`. No onnxruntime here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.generic]
Feeds = Mapping[str, Array]


@dataclass(frozen=True)
class TensorSpec:
    """An input or output as the model sees it.

    `shape` is the full shape (batch axis included when the model has one), -1 for a variable
    dimension. `dim_names` gives the symbolic name of each dimension where the file has one
    (e.g. "batch", "sequence"), which links an output axis to the input axis it follows.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    dim_names: tuple[str | None, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)


class Runtime(Protocol):
    """One loaded model instance. `run` is blocking and thread-safe to call from a worker thread."""

    @property
    def inputs(self) -> tuple[TensorSpec, ...]: ...

    @property
    def outputs(self) -> tuple[TensorSpec, ...]: ...

    @property
    def providers(self) -> tuple[str, ...]: ...

    def run(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None = None,
        into: Mapping[str, str] | None = None,
    ) -> dict[str, Array]:
        """`output_names`: the outputs wanted (None: all of them). `into` maps outputs to
        inputs whose arrays they are written into, in place (a decoder's KV cache); those
        outputs are not returned, so a step whose outputs all go `into` its inputs asks for
        none (an empty list) and gets an empty dict."""
        ...

    def close(self) -> None: ...
