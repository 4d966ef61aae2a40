"""What `inferd export` exports, as a record: a `Source` is a `torch.nn.Module` with a
positional `forward` over named input tensors, the output names, the dynamic axes, a way to
make realistic sample inputs (for tracing and for the parity check), the serving config it
implies and the tokenizer files to ship beside it. inferd.prep.sources makes one from a model
folder or a `module:factory`, inferd.prep.decoder_export from a decoder's folder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferd.prep.feeds import METADATA_KEY, FeedPlan

Feeds = dict[str, np.ndarray]


class SourceError(ValueError):
    """A source that cannot be exported: not a model folder, unknown architecture, no spec."""


@dataclass
class Source:
    module: Any  # torch.nn.Module
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    plan: FeedPlan
    """How to make sample inputs; stored in the ONNX metadata for the later steps."""
    description: str
    config: dict[str, Any] = field(default_factory=dict)
    """The model's serving config.yaml, written when the model has none yet."""
    tokenizer_dir: Path | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    """Stored in the ONNX file (architecture, heads, hidden size) for `inferd optimize`."""
    inplace: Callable[[], Any] | None = None
    """Decoders that can have an in-place KV cache: builds that graph (an onnx.ModelProto)."""
    fixed_dims: dict[str, dict[int, int]] = field(default_factory=dict)
    """Output axes of a fixed size that the exporter leaves symbolic (output -> axis -> size):
    declared so in the ONNX file."""

    @property
    def kind(self) -> str:
        return self.plan.kind

    def make_feeds(self, batch: int, length: int, rng: np.random.Generator) -> Feeds:
        """(batch, length, rng) -> feeds; `length` sizes the sequence (non-batch) axes."""
        return self.plan.maker()(batch, min(length, self.plan.max_length), rng)

    @property
    def all_metadata(self) -> dict[str, str]:
        return {**self.metadata, METADATA_KEY: self.plan.to_json()}


def tokenizer_dir(folder: Path) -> Path | None:
    return folder if (folder / "tokenizer.json").is_file() else None
