"""Writes the small ONNX graphs inferd ships in src/inferd/runtime/heads: the reductions an
instance runs on its own device right after a batch (inferd.runtime.reduction). Serving reads
the files with ONNX Runtime alone; this script, which needs the `onnx` package, is run only
when a graph changes (tests/unit/runtime/test_reduction.py checks the files are its output).

    python scripts/build_heads.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

HEADS = Path(__file__).resolve().parents[1] / "src" / "inferd" / "runtime" / "heads"
DTYPES = {"fp32": TensorProto.FLOAT, "fp16": TensorProto.FLOAT16}


def mean_pool(dtype: int) -> onnx.ModelProto:
    """`pooled[b, h]`: the mean of `states[b, s, h]` over the tokens `mask[b, s]` keeps, in
    float32. The padding is replaced, not multiplied by 0: an inf or NaN there (a causal
    model's masked rows, an fp16 overflow) stays out of the mean."""
    zero = helper.make_tensor("zero", dtype, [], [0.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    tokens = helper.make_tensor("tokens", TensorProto.INT64, [1], [1])
    last = helper.make_tensor("last", TensorProto.INT64, [1], [2])
    nodes = [
        helper.make_node("Cast", ["mask"], ["keep"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["keep", "last"], ["keep3"]),
        helper.make_node("Where", ["keep3", "states", "zero"], ["kept"]),
        helper.make_node("Cast", ["kept"], ["kept32"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["kept32", "tokens"], ["summed"], keepdims=0),
        helper.make_node("Cast", ["keep"], ["keep32"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["keep32", "tokens"], ["count"], keepdims=1),
        helper.make_node("Max", ["count", "one"], ["divisor"]),
        helper.make_node("Div", ["summed", "divisor"], ["pooled"]),
    ]
    graph = helper.make_graph(
        nodes,
        "inferd-mean-pool",
        [
            helper.make_tensor_value_info("states", dtype, ["batch", "sequence", "hidden"]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", "hidden"])],
        [zero, one, tokens, last],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every onnxruntime inferd supports reads
    model.producer_name = "inferd"
    onnx.checker.check_model(model)
    return model


def build(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, dtype in DTYPES.items():
        path = folder / f"mean_{name}.onnx"
        onnx.save(mean_pool(dtype), str(path))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HEADS):
        print(path)
