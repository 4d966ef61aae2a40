from __future__ import annotations

import numpy as np
import orjson
import pytest

from inferd.errors import EncodingError, InvalidInputError
from inferd.front.v2_codec import (
    RequestInput,
    decode_tensor,
    encode_response,
    parse_infer_request,
)


def tensor(datatype: str, shape: list[int], data: object) -> RequestInput:
    return RequestInput(name="t", datatype=datatype, shape=shape, data=data)


@pytest.mark.parametrize(
    "data", [[1, 2, 3, 4, 5, 6], [[1, 2, 3], [4, 5, 6]], [[[1, 2, 3]], [[4, 5, 6]]]]
)
def test_flat_and_nested_data_give_the_same_tensor(data: object) -> None:
    array = decode_tensor(tensor("INT32", [2, 3], data))
    assert array.dtype == np.int32
    np.testing.assert_array_equal(array, [[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize(
    ("datatype", "dtype"),
    [
        ("BOOL", np.bool_),
        ("UINT8", np.uint8),
        ("UINT16", np.uint16),
        ("UINT32", np.uint32),
        ("UINT64", np.uint64),
        ("INT8", np.int8),
        ("INT16", np.int16),
        ("INT32", np.int32),
        ("INT64", np.int64),
        ("FP16", np.float16),
        ("FP32", np.float32),
        ("FP64", np.float64),
    ],
)
def test_every_numeric_datatype_decodes_and_encodes(datatype: str, dtype: type) -> None:
    data = [True, False] if datatype == "BOOL" else [1, 2]
    array = decode_tensor(tensor(datatype, [2], data))
    assert array.dtype == dtype
    body = orjson.loads(encode_response("m", 1, "id", {"out": array})[0])
    (out,) = body["outputs"]
    assert out["datatype"] == datatype and out["shape"] == [2] and out["data"] == data


def test_bytes_travel_as_strings() -> None:
    array = decode_tensor(tensor("BYTES", [2, 1], [["héllo"], ["世界"]]))
    assert array.dtype == object and array[1, 0] == "世界"
    body = orjson.loads(encode_response("m", 1, None, {"out": array})[0])
    assert body["outputs"][0]["data"] == ["héllo", "世界"] and "id" not in body


@pytest.mark.parametrize(
    ("datatype", "shape", "data", "fragment"),
    [
        ("FP32", [2, 2], [1, 2, 3], "needs 4 elements"),
        ("INT32", [2], [1.5, 2], "integers"),
        ("UINT8", [2], [1, 300], "out of range"),
        ("INT8", [1], [-129], "out of range"),
        ("INT64", [1], [2**70], "INT64"),
        ("FP16", [1], [1e6], "out of range"),
        ("FP16", [2], [1, 70000], "out of range"),  # an integer past FP16's range, not inf
        ("FP32", [2], [True, False], "true/false"),
        ("FP32", [1] * 33, [1.0], "more than 32"),  # numpy iterates over at most 32 axes
        ("BYTES", [1] * 40, ["a"], "more than 32"),
        ("FP32", [2], ["a", "b"], "numbers"),
        ("FP32", [2, 2], [[1, 2], [3]], "rectangular"),
        ("BOOL", [1], [1], "true/false"),
        ("BYTES", [1], [1], "strings"),
        ("FP32", [-1], [1], "negative"),
        ("BF16", [1], [1.0], "BF16"),
        ("FLOAT", [1], [1.0], "unknown datatype"),
    ],
)
def test_bad_tensors_are_4004_naming_the_input(
    datatype: str, shape: list[int], data: object, fragment: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        decode_tensor(tensor(datatype, shape, data))
    assert fragment in info.value.message
    if datatype not in ("BF16", "FLOAT"):
        assert "'t'" in info.value.message


def test_flat_data_is_counted_before_it_becomes_an_array() -> None:
    with pytest.raises(InvalidInputError, match="needs 4 elements, data has 2000000"):
        decode_tensor(tensor("FP32", [1, 4], [0] * 2_000_000))


@pytest.mark.parametrize("shape", [[True, 4], [1.0, 4], ["1", 4]])
def test_a_shape_holds_integers_only(shape: list[object]) -> None:
    body = {"inputs": [{"name": "t", "datatype": "FP32", "shape": shape, "data": [1] * 4}]}
    with pytest.raises(InvalidInputError, match=r"inputs\.0\.shape\.0"):
        parse_infer_request(orjson.dumps(body))


def test_parse_rejects_malformed_bodies() -> None:
    with pytest.raises(InvalidInputError, match="empty"):
        parse_infer_request(b"")
    with pytest.raises(InvalidInputError, match="valid JSON"):
        parse_infer_request(b"{nope")
    with pytest.raises(InvalidInputError, match="inputs"):
        parse_infer_request(b'{"inputs": []}')
    with pytest.raises(InvalidInputError, match="JSON object"):
        parse_infer_request(b"[1, 2]")
    with pytest.raises(EncodingError):
        parse_infer_request(b'{"id": "\xff\xfe"}')


def test_parse_accepts_a_full_request() -> None:
    body = {
        "id": "42",
        "parameters": {"timeout": 1000},
        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}],
        "outputs": [{"name": "y"}],
    }
    parsed = parse_infer_request(orjson.dumps(body))
    assert parsed.id == "42" and parsed.outputs is not None and parsed.outputs[0].name == "y"
