"""Small real ONNX models the tests build with onnx.helper, and repository folders around them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def affine_model(path: Path) -> Path:
    """x: FP32 [batch, 4] -> y = 2x + 1 (dynamic batch axis)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    one = numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one")
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Add", ["x2", "one"], ["y"]),
    ]
    return _save(helper.make_graph(nodes, "affine", [x], [y], [two, one]), path)


def sequence_model(path: Path) -> Path:
    """input_ids, attention_mask: INT64 [batch, sequence] ->
    hidden: FP32 [batch, sequence, 2] = (ids, mask) per position;
    pooled: FP32 [batch] = sum(ids * mask) over the sequence (padding-invariant)."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])
    hidden = helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "sequence", 2])
    pooled = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch"])
    axes_last = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes_last")
    axes_seq = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes_seq")
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["ids_f", "axes_last"], ["ids_u"]),
        helper.make_node("Unsqueeze", ["mask_f", "axes_last"], ["mask_u"]),
        helper.make_node("Concat", ["ids_u", "mask_u"], ["hidden"], axis=-1),
        helper.make_node("Mul", ["ids_f", "mask_f"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axes_seq"], ["pooled"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "sequence", [ids, mask], [hidden, pooled], [axes_last, axes_seq]
    )
    return _save(graph, path)


def multi_io_model(path: Path) -> Path:
    """a: FP32 [batch, 3], b: INT32 [batch, 3], tag: BYTES [batch, 1] ->
    total: FP32 [batch, 3] = a + b;  doubled: INT32 [batch, 3] = 2b;  tag_out = tag."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 3])
    b = helper.make_tensor_value_info("b", TensorProto.INT32, ["batch", 3])
    tag = helper.make_tensor_value_info("tag", TensorProto.STRING, ["batch", 1])
    total = helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch", 3])
    doubled = helper.make_tensor_value_info("doubled", TensorProto.INT32, ["batch", 3])
    tag_out = helper.make_tensor_value_info("tag_out", TensorProto.STRING, ["batch", 1])
    nodes = [
        helper.make_node("Cast", ["b"], ["b_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a", "b_f"], ["total"]),
        helper.make_node("Add", ["b", "b"], ["doubled"]),
        helper.make_node("Identity", ["tag"], ["tag_out"]),
    ]
    graph = helper.make_graph(nodes, "multi", [a, b, tag], [total, doubled, tag_out])
    return _save(graph, path)


def half_model(path: Path) -> Path:
    """x: FP16 [batch, 3] -> y = x + x (FP16)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "half", [x], [y])
    return _save(graph, path)


def fixed_model(path: Path) -> Path:
    """x: FP64 [2, 2] (no batch axis) -> y = x + x."""
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 2])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "fixed", [x], [y])
    return _save(graph, path)


def slow_model(path: Path, layers: int = 256, width: int = 512, seed: int = 0) -> Path:
    """x: FP32 [batch, width] through `layers` MatMul+Tanh layers sharing one weight: a model
    that takes time (about 20 ms a row on one core at the defaults) in a 1 MB file."""
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])
    weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w")]
    nodes = []
    previous = "x"
    for i in range(layers):
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [previous, "w"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [out]))
        previous = out
    return _save(helper.make_graph(nodes, "slow", [x], [y], inits), path)


def write_config(folder: Path, config: dict[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


def build_repository(root: Path) -> Path:
    """The repository the integration tests serve: one model of each kind, one broken."""
    affine_model(root / "affine" / "1" / "model.onnx")
    affine_model(root / "affine" / "2" / "model.onnx")
    write_config(root / "affine", {"max_batch_size": 8, "version_policy": {"all": True}})
    sequence_model(root / "sequence" / "1" / "model.onnx")
    write_config(
        root / "sequence",
        {
            "max_batch_size": 16,
            "inputs": [
                {"name": "input_ids", "pad_value": 0},
                {"name": "attention_mask", "pad_value": 0},
            ],
            "dynamic_batching": {"max_padding_waste": 0.5},
        },
    )
    multi_io_model(root / "multi" / "1" / "model.onnx")
    fixed_model(root / "fixed" / "1" / "model.onnx")
    write_config(root / "fixed", {"max_batch_size": 0})
    broken = root / "broken" / "1" / "model.onnx"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"this is not an onnx file")
    return root


def lookup_model(path: Path, rows: int = 10, offset: float = 0.0, offset_from: int = 0) -> Path:
    """idx: INT64 [batch, 1] -> out: FP32 [batch, 1, 2], rows of a table. An index past the
    table's end makes ONNX Runtime fail the whole batch: a poisoned item for fault tests.
    `offset` is added to the rows from `offset_from` on (a version that answers otherwise)."""
    values = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    values[offset_from:] += offset
    table = numpy_helper.from_array(values, "table")
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch", 1])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 1, 2])
    node = helper.make_node("Gather", ["table", "idx"], ["out"], axis=0)
    return _save(helper.make_graph([node], "lookup", [idx], [out], [table]), path)


def big_model(path: Path, megabytes: int) -> Path:
    """x: FP32 [batch, 4] -> y = x + a row of a zero weight of `megabytes` MB, chosen by an
    index computed from x (so the runtime cannot fold the weight away): a model whose load
    takes about that much memory, and y = x."""
    rows = megabytes * 2**20 // 16
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    weight = numpy_helper.from_array(np.zeros((rows, 4), dtype=np.float32), "w")
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    nodes = [
        helper.make_node("ReduceMin", ["x"], ["low"], keepdims=0),
        helper.make_node("Mul", ["low", "zero"], ["nothing"]),
        helper.make_node("Cast", ["nothing"], ["index"], to=TensorProto.INT64),
        helper.make_node("Gather", ["w", "index"], ["row"], axis=0),
        helper.make_node("Add", ["x", "row"], ["y"]),
    ]
    return _save(helper.make_graph(nodes, "big", [x], [y], [weight, zero]), path)
