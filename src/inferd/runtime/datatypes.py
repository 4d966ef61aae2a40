"""Datatype names: KServe V2 <-> ONNX tensor types <-> numpy. No onnxruntime import."""

from __future__ import annotations

import numpy as np

from inferd.errors import InvalidInputError

# ONNX Runtime's type strings ("tensor(float)") by their inner name.
_ONNX_TO_V2: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float": "FP32",
    "double": "FP64",
    "bfloat16": "BF16",
    "string": "BYTES",
}

_V2_TO_NUMPY: dict[str, np.dtype[np.generic]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}

_NUMPY_TO_V2: dict[np.dtype[np.generic], str] = {v: k for k, v in _V2_TO_NUMPY.items()}

V2_DATATYPES: frozenset[str] = frozenset(_ONNX_TO_V2.values())


def v2_from_onnx_type(onnx_type: str) -> str:
    """'tensor(float)' -> 'FP32'. Raises ValueError for non-tensor types (sequences, maps)."""
    if not (onnx_type.startswith("tensor(") and onnx_type.endswith(")")):
        raise ValueError(f"unsupported ONNX type {onnx_type!r}: only tensors are served")
    inner = onnx_type[len("tensor(") : -1]
    try:
        return _ONNX_TO_V2[inner]
    except KeyError:
        raise ValueError(f"unsupported ONNX tensor element type {inner!r}") from None


def numpy_dtype(datatype: str) -> np.dtype[np.generic]:
    """The numpy dtype that carries a V2 datatype (BYTES -> object)."""
    try:
        return _V2_TO_NUMPY[datatype]
    except KeyError:
        if datatype == "BF16":
            raise InvalidInputError(
                "datatype BF16 has no JSON or numpy form; send FP32 instead"
            ) from None
        raise InvalidInputError(
            f"unknown datatype {datatype!r}; expected one of {sorted(V2_DATATYPES)}"
        ) from None


def v2_from_numpy(dtype: np.dtype[np.generic]) -> str:
    if dtype.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _NUMPY_TO_V2[dtype]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no V2 datatype") from None
