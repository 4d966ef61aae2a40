"""PyTorch -> ONNX: eval mode, no grad, dynamic axes, a chosen opset, named inputs and outputs.

Uses the TorchScript-based exporter (`dynamo=False`): it handles the Hugging Face encoders and
GPT-2 with a tensor KV cache without extra packages, and honours `dynamic_axes` exactly.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from inferd.prep.parity import Feeds
from inferd.prep.source_record import Source

MIN_OPSET = 13


class ExportError(RuntimeError):
    """The exporter refused the model; the message names the operator when it can."""


def to_eval(module: Any) -> list[str]:
    """Switches `module` to eval mode; returns the submodules that stayed in training mode
    (a `train()` override that ignores the switch): their outputs may differ from serving."""
    module.eval()
    return [name or type(module).__name__ for name, m in module.named_modules() if m.training]


def torch_runner(source: Source) -> Any:
    import torch

    def run(feeds: Feeds) -> list[np.ndarray]:
        with torch.no_grad():
            out = source.module(*(torch.from_numpy(feeds[n]) for n in source.input_names))
        outs = out if isinstance(out, tuple | list) else (out,)
        return [t.detach().float().numpy() if t.is_floating_point() else t.numpy() for t in outs]

    return run


def export(source: Source, path: Path, opset: int, trace_feeds: Feeds) -> None:
    import onnx
    import torch

    if opset < MIN_OPSET:
        raise ExportError(f"opset {opset} is below {MIN_OPSET}, the oldest inferd exports to")
    args = tuple(torch.from_numpy(trace_feeds[n]) for n in source.input_names)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation chatter; parity decides
            torch.onnx.export(
                source.module,
                args,
                str(path),
                dynamo=False,
                input_names=source.input_names,
                output_names=source.output_names,
                dynamic_axes=source.dynamic_axes,
                opset_version=opset,
                do_constant_folding=True,
            )
    except torch.onnx.errors.UnsupportedOperatorError as exc:
        first = str(exc).strip().splitlines()[0]  # names the operator; the IR dump follows
        raise ExportError(f"an operator ONNX cannot express: {first}") from exc
    except (RuntimeError, torch.onnx.errors.OnnxExporterError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"the exporter failed: {first}") from exc
    model = onnx.load(str(path))
    declared = {o.name: o.type.tensor_type.shape for o in model.graph.output}
    for name, axes in source.fixed_dims.items():
        for axis, size in axes.items():
            dim = declared[name].dim[axis]
            dim.ClearField("dim_param")
            dim.dim_value = size
    for key, value in source.all_metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
