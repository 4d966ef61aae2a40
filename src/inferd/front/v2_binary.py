"""The KServe V2 binary tensor extension: raw little-endian tensor bytes after the JSON header.

A body with binary data is the JSON header followed by each binary tensor's bytes, in the order
of the tensors in the JSON; `Inference-Header-Content-Length` gives the header's size and each
tensor's `binary_data_size` parameter its own. BYTES elements are a 4-byte little-endian length
followed by the bytes. Stock `tritonclient.http` uses this by default.
"""

from __future__ import annotations

import struct

import numpy as np

from inferd.errors import EncodingError, InvalidInputError
from inferd.runtime.datatypes import numpy_dtype
from inferd.runtime.protocol import Array

HEADER_LENGTH = "inference-header-content-length"
_LENGTH = struct.Struct("<I")


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview | None]:
    """The JSON part and the binary part (None when the body is JSON only)."""
    if header_length is None:
        return body, None
    # isascii: str.isdigit also accepts digits int() refuses ("²")
    if not (header_length.isascii() and header_length.isdigit()) or int(header_length) > len(body):
        raise InvalidInputError(
            f"Inference-Header-Content-Length {header_length!r} does not fit a body of "
            f"{len(body)} bytes"
        )
    size = int(header_length)
    return body[:size], memoryview(body)[size:]


def decode_binary(name: str, datatype: str, shape: list[int], raw: memoryview) -> Array:
    count = 1
    for dim in shape:
        count *= dim
    dtype = numpy_dtype(datatype)
    if dtype.kind == "O":
        return _decode_bytes_elements(name, raw, count).reshape(shape)
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise InvalidInputError(
            f"input '{name}': binary_data_size {len(raw)} does not match shape {shape} of "
            f"{datatype} ({expected} bytes)"
        )
    array = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)
    if dtype.kind == "b" and array.size and not np.isin(array.view(np.uint8), (0, 1)).all():
        raise InvalidInputError(f"input '{name}': BOOL bytes must be 0 or 1")
    return array.astype(dtype, copy=False)


def _decode_bytes_elements(name: str, raw: memoryview, count: int) -> Array:
    items: list[str] = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise InvalidInputError(f"input '{name}': truncated BYTES element length")
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise InvalidInputError(f"input '{name}': a BYTES element runs past its tensor")
        try:
            items.append(bytes(raw[offset : offset + length]).decode("utf-8"))
        except UnicodeDecodeError:
            raise EncodingError(
                f"input '{name}': BYTES element {len(items)} is not valid UTF-8"
            ) from None
        offset += length
    if len(items) != count:
        raise InvalidInputError(
            f"input '{name}': shape needs {count} BYTES elements, the binary data has {len(items)}"
        )
    array = np.empty(count, dtype=object)
    array[:] = items
    return array


def encode_binary(array: Array) -> memoryview:
    """The binary extension's bytes of `array`, flat: a view of the array itself when it is
    already little-endian and contiguous (no copy of a large tensor), else of a copy."""
    if array.dtype.kind in ("O", "U", "S"):
        parts = []
        for item in array.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts.append(_LENGTH.pack(len(data)))
            parts.append(data)
        return memoryview(b"".join(parts))
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return np.ascontiguousarray(little).data.cast("B")
