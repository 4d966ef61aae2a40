"""KServe V2 tensors in protobuf: a `ModelInferRequest`'s inputs as arrays (typed `contents`,
or `raw_input_contents` in the binary extension's layout), parameters as plain values, and
outputs into a `ModelInferResponse` as `raw_output_contents` (what Triton answers, and what
every client reads), kept as views of the arrays until `wire` writes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from inferd.errors import EncodingError, InvalidInputError
from inferd.front.v2_binary import decode_binary, encode_binary
from inferd.front.v2_codec import check_shape
from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.wire import InferAnswer
from inferd.runtime.datatypes import numpy_dtype, v2_from_numpy
from inferd.runtime.protocol import Array

CONTENTS_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
"""Which typed field of `InferTensorContents` carries a datatype (FP16 and BF16 have none:
they travel as raw bytes)."""


def parameter_values(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """`map<string, InferParameter>` as plain values (an unset parameter is left out)."""
    values: dict[str, Any] = {}
    for name, parameter in parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if which is not None:
            values[name] = getattr(parameter, which)
    return values


def decode_inputs(
    request: pb.ModelInferRequest,
    raw: Sequence[memoryview] | None = None,
    packed: Mapping[tuple[int, int], Sequence[memoryview]] | None = None,
) -> dict[str, Array]:
    """The request's inputs; `raw` stands for its `raw_input_contents`, and `packed` for
    its inputs' packed floating-point contents, where those were cut out on arrival (see
    `wire`)."""
    if raw is None:
        raw = [memoryview(entry) for entry in request.raw_input_contents]
    if raw and len(raw) != len(request.inputs):
        raise InvalidInputError(
            f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: give every input "
            "raw or none"
        )
    feeds: dict[str, Array] = {}
    for index, tensor in enumerate(request.inputs):
        name = tensor.name
        if name in feeds:
            raise InvalidInputError(f"input '{name}' is given twice")
        shape = list(tensor.shape)
        check_shape(name, shape)
        if raw:
            feeds[name] = decode_binary(name, tensor.datatype, shape, raw[index])
        elif packed and (index, PACKED_FIELD.get(tensor.datatype, 0)) in packed:
            views = packed[index, PACKED_FIELD[tensor.datatype]]
            feeds[name] = _packed(name, tensor.datatype, shape, tensor.contents, views)
        else:
            feeds[name] = _typed(name, tensor.datatype, shape, tensor.contents)
    return feeds


PACKED_FIELD: dict[str, int] = {"FP32": 6, "FP64": 7}
"""Field numbers of the typed contents a request's walk cuts out as bytes (inferd.grpc_v2.wire):
packed little-endian floating-point numbers, read as arrays of the received bytes."""


def _packed(
    name: str,
    datatype: str,
    shape: list[int],
    contents: pb.InferTensorContents,
    views: Sequence[memoryview],
) -> Array:
    field = CONTENTS_FIELD[datatype]
    if len(getattr(contents, field)):
        raise InvalidInputError(
            f"input '{name}': contents.{field} mixes packed and unpacked entries; send it "
            "packed, as protobuf writes it"
        )
    data = views[0] if len(views) == 1 else b"".join(views)
    dtype = numpy_dtype(datatype).newbyteorder("<")
    count = int(np.prod(shape))
    if len(data) != count * dtype.itemsize:
        raise InvalidInputError(
            f"input '{name}': shape {shape} needs {count} elements, contents.{field} has "
            f"{len(data) / dtype.itemsize:g}"
        )
    return np.frombuffer(data, dtype=dtype).astype(numpy_dtype(datatype), copy=False).reshape(shape)


def _typed(name: str, datatype: str, shape: list[int], contents: pb.InferTensorContents) -> Array:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        numpy_dtype(datatype)  # an unknown name gets its own answer
        raise InvalidInputError(
            f"input '{name}': {datatype} has no typed contents; send it in raw_input_contents"
        )
    values = getattr(contents, field)
    count = int(np.prod(shape))
    if len(values) != count:
        raise InvalidInputError(
            f"input '{name}': shape {shape} needs {count} elements, "
            f"contents.{field} has {len(values)}"
        )
    dtype = numpy_dtype(datatype)
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        try:
            array[:] = [bytes(v).decode("utf-8") for v in values]
        except UnicodeDecodeError:  # 4003, as over HTTP
            raise EncodingError(f"input '{name}': a BYTES element is not valid UTF-8") from None
        return array.reshape(shape)
    wide = _to_numpy(values, _WIDE.get(dtype.kind, np.int64), count)
    if dtype.kind in "iu" and wide.size:
        info = np.iinfo(dtype)  # type: ignore[type-var]  # an integer type here
        if int(wide.min()) < info.min or int(wide.max()) > info.max:
            raise InvalidInputError(
                f"input '{name}': value out of range for {datatype} [{info.min}, {info.max}]"
            )
    return wide.astype(dtype, copy=False).reshape(shape)


_WIDE: dict[str, type[np.generic]] = {"f": np.float64, "u": np.uint64}
CHUNK = 65536
"""Typed values converted at a time: each conversion holds the interpreter for its length (a
few milliseconds), so a large message decoded in a worker thread leaves the loop its turns."""


def _to_numpy(values: Sequence[Any], dtype: type[np.generic], count: int) -> Array:
    out = np.empty(count, dtype=dtype)
    for start in range(0, count, CHUNK):
        out[start : start + CHUNK] = values[start : start + CHUNK]
    return out


def encode_outputs(answer: InferAnswer, outputs: Mapping[str, Array]) -> InferAnswer:
    for name, array in outputs.items():
        tensor = answer.message.outputs.add()
        tensor.name = name
        tensor.datatype = v2_from_numpy(array.dtype)
        tensor.shape.extend(array.shape)
        answer.raw.append(encode_binary(array))
    return answer
