"""The narrow runtime interface: tensor specs and `run(feeds) -> outputs`. No onnxruntime here."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True)
class Repeat:
    """The same run up to `steps` times back to back, on one instance's thread, with
    `between(k)` called there after run k (it may change the feeds in place for the next run;
    False: no more runs): a decoder's block of steps costs one handoff to the runtime's
    thread, not one a step, and the steps follow each other as closely as bare ONNX
    Runtime's would."""

    steps: int
    between: Callable[[int], bool]


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

    def run_steps(
        self,
        feeds: Feeds,
        output_names: Sequence[str] | None,
        into: Mapping[str, str] | None,
        repeat: Repeat,
    ) -> dict[str, Array]:
        """`run` up to `repeat.steps` times on `feeds`, which `repeat.between(k)` may change
        in place after run k for the next; the last run's outputs."""
        ...

    def close(self) -> None: ...
