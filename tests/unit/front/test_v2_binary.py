from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from inferd.errors import EncodingError, InvalidInputError
from inferd.front.v2_binary import decode_binary, encode_binary, split_body
from inferd.front.v2_codec import (
    binary_outputs,
    decode_inputs,
    encode_response,
    parse_infer_request,
)


def bytes_elements(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(i)) + i for i in items)


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, np.float64, np.int8, np.uint16, np.int64, np.bool_]
)
def test_numeric_round_trip(dtype: type) -> None:
    array = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    datatype = {
        np.float32: "FP32",
        np.float16: "FP16",
        np.float64: "FP64",
        np.int8: "INT8",
        np.uint16: "UINT16",
        np.int64: "INT64",
        np.bool_: "BOOL",
    }[dtype]
    decoded = decode_binary("t", datatype, [2, 3], memoryview(encode_binary(array)))
    assert decoded.dtype == array.dtype
    np.testing.assert_array_equal(decoded, array)


def test_bytes_round_trip_and_utf8() -> None:
    raw = bytes_elements("héllo".encode(), b"", "世界".encode())
    decoded = decode_binary("t", "BYTES", [3], memoryview(raw))
    assert list(decoded) == ["héllo", "", "世界"]
    assert encode_binary(decoded) == raw


@pytest.mark.parametrize(
    ("datatype", "shape", "raw", "error"),
    [
        ("FP32", [2], b"\x00" * 7, InvalidInputError),
        ("BYTES", [2], bytes_elements(b"a"), InvalidInputError),
        ("BYTES", [1], b"\x05\x00\x00\x00ab", InvalidInputError),
        ("BYTES", [1], b"\x01\x00", InvalidInputError),
        ("BYTES", [1], bytes_elements(b"\xff"), EncodingError),
        ("BOOL", [1], b"\x02", InvalidInputError),
    ],
)
def test_bad_binary_tensors(datatype: str, shape: list[int], raw: bytes, error: type) -> None:
    with pytest.raises(error):
        decode_binary("t", datatype, shape, memoryview(raw))


def test_a_whole_binary_request_and_response() -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [2, 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                },
                {"name": "n", "shape": [1], "datatype": "INT32", "data": [7]},
            ],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}],
        }
    )
    body = header + x.tobytes()
    json_part, binary = split_body(body, str(len(header)))
    request = parse_infer_request(json_part)
    feeds = decode_inputs(request, binary)
    np.testing.assert_array_equal(feeds["x"], x)
    assert feeds["n"].tolist() == [7]
    chosen = binary_outputs(request, ["y", "z"])
    assert chosen == {"y"}
    out, length = encode_response("m", 1, None, {"y": x * 2, "z": x[:, :1]}, chosen)
    assert length is not None
    meta = orjson.loads(out[:length])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == x.nbytes
    assert "data" not in meta["outputs"][0] and meta["outputs"][1]["data"] == [0.0, 4.0]
    np.testing.assert_array_equal(np.frombuffer(out[length:], np.float32), (x * 2).ravel())


def test_binary_data_output_parameter_makes_every_output_binary() -> None:
    request = parse_infer_request(
        orjson.dumps(
            {
                "parameters": {"binary_data_output": True},
                "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
                "outputs": [{"name": "b", "parameters": {"binary_data": False}}],
            }
        )
    )
    assert binary_outputs(request, ["a", "b"]) == {"a"}


def test_sizes_that_do_not_add_up_are_rejected() -> None:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [1],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 4},
                }
            ]
        }
    )
    request = parse_infer_request(header)
    with pytest.raises(InvalidInputError, match="runs past"):
        decode_inputs(request, memoryview(b"\x00\x00"))
    with pytest.raises(InvalidInputError, match="belong to no input"):
        decode_inputs(request, memoryview(b"\x00" * 8))
    with pytest.raises(InvalidInputError, match="runs past"):
        decode_inputs(request, None)
    with pytest.raises(InvalidInputError, match="does not fit"):
        split_body(b"{}", "99")
