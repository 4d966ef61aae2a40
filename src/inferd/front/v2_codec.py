"""KServe V2 tensors (JSON, or binary per the extension) <-> numpy arrays, strictly checked.

Data may be flat row-major or nested; it must hold exactly prod(shape) elements of the declared
datatype. Integers are never silently truncated or wrapped: a float for an INT input or a value
out of the type's range is a 4004 that names the input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from inferd.errors import InvalidInputError
from inferd.front.jsonbody import validate_body
from inferd.front.v2_binary import decode_binary, encode_binary
from inferd.runtime.datatypes import numpy_dtype, v2_from_numpy
from inferd.runtime.protocol import Array


class RequestInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[StrictInt]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: Any = Field(None, description="Row-major, flat or nested; absent for binary data.")

    def binary_size(self) -> int | None:
        size = (self.parameters or {}).get("binary_data_size")
        if size is None:
            return None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(f"input '{self.name}': binary_data_size must be a count")
        return size


class RequestOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    parameters: dict[str, Any] | None = None


class InferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[RequestInput] = Field(min_length=1)
    outputs: list[RequestOutput] | None = None


def parse_infer_request(body: bytes) -> InferRequest:
    return validate_body(InferRequest, body)


MAX_RANK = 32
"""The most dimensions an input may have: numpy iterates over at most 32, and no model's input
has nearly as many."""


def check_shape(name: str, shape: list[int]) -> int:
    if len(shape) > MAX_RANK:
        raise InvalidInputError(
            f"input '{name}': shape has {len(shape)} dimensions, more than {MAX_RANK}"
        )
    if any(d < 0 for d in shape):
        raise InvalidInputError(f"input '{name}': shape {shape} has a negative dimension")
    # a zero dimension makes the count 0, but numpy still refuses an absurd shape ([0, 2**62])
    if math.prod(max(d, 1) for d in shape) > 2**31:
        raise InvalidInputError(f"input '{name}': shape {shape} is too large")
    return math.prod(shape)


def decode_tensor(tensor: RequestInput) -> Array:
    """One V2 input as a numpy array of its declared datatype and shape."""
    name = tensor.name
    count = check_shape(name, tensor.shape)
    dtype = numpy_dtype(tensor.datatype)
    data = tensor.data
    if not isinstance(data, list):
        data = [data]
    if data and not isinstance(data[0], list) and len(data) != count:
        # flat data: counted before tens of millions of values become an array
        raise InvalidInputError(
            f"input '{name}': shape {tensor.shape} needs {count} elements, data has {len(data)}"
        )
    try:
        if dtype.kind == "O":
            array = _decode_bytes(name, data)
        else:
            array = _decode_numbers(name, data, dtype)
    except (ValueError, OverflowError, TypeError) as exc:
        raise InvalidInputError(
            f"input '{name}': data is not a rectangular array of {tensor.datatype} ({exc})"
        ) from None
    if array.size != count:
        raise InvalidInputError(
            f"input '{name}': shape {tensor.shape} needs {count} elements, data has {array.size}"
        )
    return array.reshape(tensor.shape)


def _decode_numbers(name: str, data: list[Any], dtype: np.dtype[np.generic]) -> Array:
    parsed = np.asarray(data)
    kind = parsed.dtype.kind
    if parsed.size == 0:
        return parsed.astype(dtype)
    if dtype.kind == "b":
        if kind != "b":
            raise InvalidInputError(f"input '{name}': BOOL data must be true/false")
        return parsed
    if kind == "b":
        raise InvalidInputError(
            f"input '{name}': data must be {v2_from_numpy(dtype)} numbers, got true/false"
        )
    if kind not in "iuf":
        raise InvalidInputError(
            f"input '{name}': data must be {v2_from_numpy(dtype)} numbers "
            "(found non-numbers or values out of any numeric range)"
        )
    if dtype.kind in "iu":
        if kind == "f":
            raise InvalidInputError(
                f"input '{name}': {v2_from_numpy(dtype)} data must be integers, got decimals"
            )
        info = np.iinfo(dtype)  # type: ignore[type-var]  # dtype is an integer type here
        low, high = int(parsed.min()), int(parsed.max())
        if low < info.min or high > info.max:
            raise InvalidInputError(
                f"input '{name}': value out of range for {v2_from_numpy(dtype)} "
                f"[{info.min}, {info.max}]"
            )
    elif dtype.kind == "f":  # decimals or integers: FP16's range ends at 65504
        finite_max = float(np.finfo(dtype).max)  # type: ignore[type-var]  # a float type here
        with np.errstate(invalid="ignore"):
            values = parsed if kind == "f" else parsed.astype(np.float64)
            too_big = np.abs(values[np.isfinite(values)]).max(initial=0.0) > finite_max
        if too_big:
            raise InvalidInputError(
                f"input '{name}': value out of range for {v2_from_numpy(dtype)}"
            )
    return parsed.astype(dtype, copy=False)


def _decode_bytes(name: str, data: list[Any]) -> Array:
    array = np.array(data, dtype=object)
    for item in array.flat:
        if not isinstance(item, str):
            raise InvalidInputError(f"input '{name}': BYTES data must be strings")
    return array


def decode_inputs(request: InferRequest, binary: memoryview | None = None) -> dict[str, Array]:
    """Every input as an array; binary inputs take their bytes from `binary`, in order."""
    feeds: dict[str, Array] = {}
    offset = 0
    for tensor in request.inputs:
        if tensor.name in feeds:
            raise InvalidInputError(f"input '{tensor.name}' is given twice")
        size = tensor.binary_size()
        if size is None:
            if tensor.data is None:
                raise InvalidInputError(f"input '{tensor.name}' has neither data nor binary data")
            feeds[tensor.name] = decode_tensor(tensor)
            continue
        if binary is None or offset + size > len(binary):
            raise InvalidInputError(
                f"input '{tensor.name}': binary_data_size {size} runs past the binary data "
                "(is Inference-Header-Content-Length set?)"
            )
        check_shape(tensor.name, tensor.shape)
        raw = binary[offset : offset + size]
        feeds[tensor.name] = decode_binary(tensor.name, tensor.datatype, tensor.shape, raw)
        offset += size
    if binary is not None and offset != len(binary):
        raise InvalidInputError(f"{len(binary) - offset} bytes of binary data belong to no input")
    return feeds


def binary_outputs(request: InferRequest, names: list[str]) -> set[str]:
    """The outputs to send as binary: `binary_data_output`, overridden per output."""
    default = bool((request.parameters or {}).get("binary_data_output", False))
    chosen = {name for name in names if default}
    for output in request.outputs or ():
        flag = (output.parameters or {}).get("binary_data")
        if flag is True:
            chosen.add(output.name)
        elif flag is False:
            chosen.discard(output.name)
    return chosen


def encode_response(
    model: str,
    version: int,
    request_id: str | None,
    outputs: Mapping[str, Array],
    binary: set[str] | frozenset[str] = frozenset(),
) -> tuple[bytes, int | None]:
    """The response body, and the JSON header's length when binary outputs follow it."""
    tensors = []
    blobs: list[memoryview] = []
    for name, array in outputs.items():
        datatype = v2_from_numpy(array.dtype)
        if name in binary:
            blob = encode_binary(array)
            blobs.append(blob)
            tensors.append(
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": list(array.shape),
                    "parameters": {"binary_data_size": blob.nbytes},
                }
            )
            continue
        flat = np.ascontiguousarray(array).reshape(-1)
        data: Any = flat.tolist() if datatype == "BYTES" else flat
        if datatype == "BYTES":
            data = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in data]
        tensors.append(
            {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}
        )
    body: dict[str, Any] = {"model_name": model, "model_version": str(version), "outputs": tensors}
    if request_id is not None:
        body["id"] = request_id
    header = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)
