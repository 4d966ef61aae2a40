"""The bounded walk of a received message: it accepts whatever protobuf writes, counts what
protobuf's parser would build (fields at every depth, elements of packed integer lists), and
stops at its budget after work proportional to the budget, not to the message."""

from __future__ import annotations

import random

import pytest

from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.message_scan import Malformed, OverBudget, walk

DESCRIPTOR = pb.ModelInferRequest.DESCRIPTOR


def full_request(rng: random.Random) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", model_version="1", id=str(rng.random()))
    for index in range(rng.randint(0, 4)):
        request.parameters[f"p{index}"].int64_param = rng.randint(-(2**40), 2**40)
        request.parameters[f"s{index}"].string_param = "x" * rng.randint(0, 300)
    for index in range(rng.randint(1, 3)):
        tensor = request.inputs.add(name=f"in{index}", datatype="INT64", shape=[2, 2])
        tensor.contents.int64_contents.extend(rng.randint(-(2**62), 2**62) for _ in range(4))
        tensor.contents.fp32_contents.extend(rng.random() for _ in range(rng.randint(0, 50)))
        tensor.contents.bytes_contents.extend(b"b" * rng.randint(0, 3) for _ in range(3))
        tensor.parameters["binary_data_size"].int64_param = 16
    request.outputs.add(name="y").parameters["classification"].int64_param = 2
    request.raw_input_contents.append(rng.randbytes(rng.randint(0, 200)))
    return request


def test_every_message_protobuf_writes_is_walked_and_parses_the_same() -> None:
    rng = random.Random(7)
    for _ in range(200):
        request = full_request(rng)
        data = request.SerializeToString()
        walked = walk(data, DESCRIPTOR, 10_000, {7: None})
        rest = pb.ModelInferRequest.FromString(b"".join(walked.rest))
        rest.raw_input_contents.extend(bytes(view) for view in walked.cut)
        assert rest == request


def test_nested_fields_and_packed_integers_count_against_the_budget() -> None:
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype="INT64", shape=[1000])
    tensor.contents.int64_contents.extend(range(1000))
    data = request.SerializeToString()
    # model_name, inputs; in the tensor name, datatype, shape (a packed field, 1 integer),
    # contents; in them int64_contents (a packed field, 1,000 integers)
    needed = 2 + (3 + 1) + 1 + (1 + 1000)
    walk(data, DESCRIPTOR, needed)
    with pytest.raises(OverBudget):
        walk(data, DESCRIPTOR, needed - 1)


def test_packed_floats_count_as_one_field() -> None:
    request = pb.ModelInferRequest()
    request.inputs.add(name="x").contents.fp32_contents.extend([0.5] * 100_000)
    walk(request.SerializeToString(), DESCRIPTOR, 10)


def test_a_flood_of_tiny_fields_stops_at_the_budget() -> None:
    flood = b"\xa0\x06\x01" * (10_000_000 // 3)  # 10 MB of unknown field 100, varint 1
    with pytest.raises(OverBudget):
        walk(flood, DESCRIPTOR, 10_000)
    empty_inputs = b"\x2a\x00" * 1_000_000
    with pytest.raises(OverBudget):
        walk(empty_inputs, DESCRIPTOR, 10_000)


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05ab",  # a string running past the end
        b"\x2a\x03\x0a\x05a",  # a nested message's field running past the nested end
        b"\x08" + b"\xff" * 11,  # a varint over ten bytes
        b"\x00\x01",  # field number 0
        b"\x0b\x0c",  # a group
        b"\x2a\x02\x0b\x0c",  # a group inside a tensor
    ],
)
def test_malformed_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(Malformed):
        walk(data, DESCRIPTOR, 1000)
