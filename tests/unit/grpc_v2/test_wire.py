"""ModelInfer's messages read and written without protobuf's copies must mean exactly what
protobuf's own parse and serialization mean."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.scan import Malformed
from inferd.grpc_v2.wire import InferAnswer, parse_infer_request, serialize_infer_response
from inferd.server.v2_binary import encode_binary

BUDGET = 1000


def request_with_raw() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", model_version="2", id="req-1")
    request.parameters["priority"].int64_param = 3
    request.parameters["route_key"].string_param = "user-7"
    for name, shape in (("a", [2, 3]), ("b", [1])):
        request.inputs.add(name=name, datatype="FP32", shape=shape)
    request.outputs.add(name="y")
    request.raw_input_contents.append(np.arange(6, dtype=np.float32).tobytes())
    request.raw_input_contents.append(b"\x00\x00\x80\x3f")
    return request


def test_a_request_parses_to_the_same_fields_with_its_raw_contents_as_views() -> None:
    request = request_with_raw()
    data = request.SerializeToString()
    call = parse_infer_request(data, BUDGET)
    expected = pb.ModelInferRequest()
    expected.CopyFrom(request)
    del expected.raw_input_contents[:]
    assert call.message == expected
    assert [bytes(view) for view in call.raw] == list(request.raw_input_contents)
    assert all(view.obj is data for view in call.raw)  # (views of what arrived: no copy)


def test_raw_entries_anywhere_in_the_message_keep_their_order() -> None:
    request = request_with_raw()
    raw = list(request.raw_input_contents)
    del request.raw_input_contents[:]
    head = pb.ModelInferRequest(raw_input_contents=[raw[0]]).SerializeToString()
    tail = pb.ModelInferRequest(raw_input_contents=[raw[1]]).SerializeToString()
    data = head + request.SerializeToString() + tail  # (concatenated messages merge)
    call = parse_infer_request(data, BUDGET)
    assert call.message == request
    assert [bytes(view) for view in call.raw] == raw


def test_unknown_fields_of_every_wire_type_pass_through_to_protobuf() -> None:
    request = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"abcd"])
    unknown = (
        b"\xd0\x05\x96\x01"  # field 90, varint 150
        + b"\xd9\x05"
        + bytes(8)  # field 91, fixed64
        + b"\xe5\x05"
        + bytes(4)  # field 92, fixed32
        + b"\xea\x05\x02hi"  # field 93, length-delimited
    )
    call = parse_infer_request(request.SerializeToString() + unknown, BUDGET)
    assert call.message.model_name == "m"
    assert [bytes(view) for view in call.raw] == [b"abcd"]
    assert call.message.SerializeToString().endswith(unknown)


@pytest.mark.parametrize(
    "data",
    [b"\x0a\x05ab", b"\x0a", b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"],
    ids=["truncated-field", "truncated-length", "varint-too-long"],
)
def test_malformed_bytes_are_refused_before_protobuf_parses_them(data: bytes) -> None:
    with pytest.raises(Malformed):
        parse_infer_request(data, BUDGET)


def test_a_group_is_refused_the_protocol_has_none() -> None:
    raw = pb.ModelInferRequest(raw_input_contents=[b"xy"]).SerializeToString()
    with pytest.raises(Malformed):
        parse_infer_request(b"\xcb\x05\xcc\x05" + raw, BUDGET)  # (an empty group: field 89)


def test_a_response_serializes_to_the_message_protobuf_would_write() -> None:
    outputs = {
        "y": np.arange(12, dtype=np.float16).reshape(3, 4),
        "s": np.array(["é", "b"], dtype=object),
        "z": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
    }
    head = pb.ModelInferResponse(model_name="m", model_version="1", id="x")
    head.parameters["final"].bool_param = True
    answer = InferAnswer(head)
    for name, array in outputs.items():
        answer.message.outputs.add(name=name, shape=array.shape)
        answer.raw.append(encode_binary(array))
    parsed = pb.ModelInferResponse.FromString(serialize_infer_response(answer))
    assert parsed.model_name == "m" and parsed.parameters["final"].bool_param
    assert [o.name for o in parsed.outputs] == ["y", "s", "z"]
    assert parsed.raw_output_contents[0] == outputs["y"].tobytes()
    assert parsed.raw_output_contents[1] == b"\x02\x00\x00\x00\xc3\xa9\x01\x00\x00\x00b"
    assert parsed.raw_output_contents[2] == np.ascontiguousarray(outputs["z"]).tobytes()
    whole = InferAnswer(pb.ModelInferResponse(), [encode_binary(outputs["y"])]).complete()
    assert whole.raw_output_contents[0] == outputs["y"].tobytes()


def test_a_whole_message_is_serialized_by_protobuf() -> None:
    message = pb.ModelInferResponse(model_name="g", raw_output_contents=[b"\x00"])
    assert serialize_infer_response(message) == message.SerializeToString()
