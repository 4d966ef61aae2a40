"""ModelInfer's messages read and written without protobuf's copies must mean exactly what
protobuf's own parse and serialization mean."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.errors import EncodingError, InvalidInputError
from inferd.front.v2_binary import encode_binary
from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.codec import decode_inputs
from inferd.grpc_v2.message_scan import Malformed
from inferd.grpc_v2.wire import InferAnswer, parse_infer_request, serialize_infer_response

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


def typed_request(rng: np.random.Generator) -> pb.ModelInferRequest:
    """Inputs of every typed kind, floats among them, with parameters and an output."""
    request = pb.ModelInferRequest(model_name="m", id="t")
    request.parameters["route_key"].string_param = "k"
    for index in range(int(rng.integers(1, 5))):
        rows = int(rng.integers(0, 40))
        kind = ("FP32", "FP64", "INT64", "BYTES")[index % 4]
        tensor = request.inputs.add(name=f"in{index}", datatype=kind, shape=[rows])
        tensor.parameters["p"].int64_param = index
        if kind == "FP32":
            tensor.contents.fp32_contents.extend(rng.standard_normal(rows).astype(np.float32))
        elif kind == "FP64":
            tensor.contents.fp64_contents.extend(rng.standard_normal(rows))
        elif kind == "INT64":
            tensor.contents.int64_contents.extend(rng.integers(-(2**40), 2**40, rows).tolist())
        else:
            tensor.contents.bytes_contents.extend(b"b%d" % i for i in range(rows))
    request.outputs.add(name="y")
    return request


def test_typed_floats_are_read_from_the_received_bytes_and_mean_what_protobuf_reads() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        request = typed_request(rng)
        data = request.SerializeToString()
        call = parse_infer_request(data, BUDGET)
        ours = decode_inputs(call.message, call.raw, call.packed)
        theirs = decode_inputs(pb.ModelInferRequest.FromString(data))
        assert ours.keys() == theirs.keys()
        for name, array in theirs.items():
            assert ours[name].dtype == array.dtype and ours[name].shape == array.shape
            assert np.array_equal(ours[name], array), name
        # every field but the packed floats reaches protobuf; those stay in what arrived
        kept = pb.ModelInferRequest()
        kept.CopyFrom(request)
        for tensor in kept.inputs:
            del tensor.contents.fp32_contents[:]
            del tensor.contents.fp64_contents[:]
        assert call.message == kept
        assert all(view.obj is data for views in call.packed.values() for view in views)


def test_packed_floats_split_over_entries_and_merged_messages_keep_their_order() -> None:
    values = np.arange(10, dtype=np.float32)
    first = pb.ModelInferRequest(model_name="m")
    first.inputs.add(name="x", datatype="FP32", shape=[10]).contents.fp32_contents.extend(
        values[:4]
    )
    # a second occurrence of the same input's contents (protobuf merges: lists concatenate)
    more = pb.ModelInferRequest.InferInputTensor()
    more.contents.fp32_contents.extend(values[4:])
    entry = first.inputs[0].SerializeToString() + more.SerializeToString()
    data = (
        pb.ModelInferRequest(model_name="m").SerializeToString()
        + b"\x2a"
        + bytes([len(entry)])
        + entry
    )
    assert pb.ModelInferRequest.FromString(data).inputs[0].contents.fp32_contents == list(values)
    call = parse_infer_request(data, BUDGET)
    feeds = decode_inputs(call.message, call.raw, call.packed)
    assert np.array_equal(feeds["x"], values)


def test_floats_packed_and_unpacked_in_one_tensor_or_of_the_wrong_count_are_refused() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[3]).contents.fp32_contents.extend(
        [1.0, 2.0]
    )
    data = request.SerializeToString()
    call = parse_infer_request(data, BUDGET)
    with pytest.raises(InvalidInputError, match=r"needs 3 elements, contents\.fp32_contents has 2"):
        decode_inputs(call.message, call.raw, call.packed)
    # field 6 of the contents once unpacked (fixed32, tag 0x35) beside the packed run
    unpacked = b"\x35" + np.float32(3.0).tobytes()
    contents = request.inputs[0].contents.SerializeToString() + unpacked
    tensor = pb.ModelInferRequest.InferInputTensor(
        name="x", datatype="FP32", shape=[3]
    ).SerializeToString()
    tensor += b"\x2a" + bytes([len(contents)]) + contents
    mixed = b"\x2a" + bytes([len(tensor)]) + tensor
    call = parse_infer_request(mixed, BUDGET)
    with pytest.raises(InvalidInputError, match="mixes packed and unpacked"):
        decode_inputs(call.message, call.raw, call.packed)


def test_a_bytes_element_that_is_not_utf8_is_an_encoding_error_as_over_http() -> None:
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="tag", datatype="BYTES", shape=[2])
    tensor.contents.bytes_contents.extend([b"fine", b"\xff\xfe"])
    with pytest.raises(EncodingError, match="input 'tag': a BYTES element is not valid UTF-8"):
        decode_inputs(request)
    binary = encode_binary(np.array([b"fine", b"\xff\xfe"], dtype=object))
    raw = pb.ModelInferRequest(model_name="m")
    raw.inputs.add(name="tag", datatype="BYTES", shape=[2])
    raw.raw_input_contents.append(bytes(binary))
    with pytest.raises(EncodingError, match="not valid UTF-8"):
        decode_inputs(raw)
