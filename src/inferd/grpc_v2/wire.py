"""ModelInfer's two messages on the wire without copying their tensors.

Protobuf would copy a request's `raw_input_contents` twice (into its message, then out as a
`bytes` per entry) and a response's `raw_output_contents` three times (`tobytes`, into the
message, into the serialized string): on a 1 MB tensor that is most of the server's work. The
encoding allows better. A message is a sequence of fields, and a repeated field's entries may
stand anywhere in it; so a request's raw entries are cut out of the received bytes as views (the
rest goes to protobuf), and a response is protobuf's serialization of everything else followed
by one `raw_output_contents` entry per output, written from the arrays' own memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inferd.grpc_v2 import kserve_v2_pb2 as pb

RAW_INPUT_CONTENTS = 7
"""Field number of `ModelInferRequest.raw_input_contents`."""
RAW_OUTPUT_CONTENTS = 6
"""Field number of `ModelInferResponse.raw_output_contents`."""

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
"""Protobuf's wire types (the deprecated groups, 3 and 4, are left to protobuf's parser)."""


@dataclass(slots=True)
class InferCall:
    """A received `ModelInferRequest`: its fields but the raw contents, and those as views of
    the received bytes (one per input, in order)."""

    message: pb.ModelInferRequest
    raw: Sequence[memoryview] = ()


@dataclass(slots=True)
class InferAnswer:
    """A `ModelInferResponse` to send: its fields but the raw contents, and those (one per
    output, in order) as flat views of the outputs."""

    message: pb.ModelInferResponse
    raw: list[memoryview] = field(default_factory=list)

    def complete(self) -> pb.ModelInferResponse:
        """The whole message (for a stream, where it travels inside another)."""
        self.message.raw_output_contents.extend(bytes(view) for view in self.raw)
        self.raw = []
        return self.message


class _Unusual(ValueError):
    """The bytes are not a plain sequence of fields: protobuf's parser judges them."""


def parse_infer_request(data: bytes) -> InferCall:
    """The gRPC request deserializer of ModelInfer. Malformed bytes raise protobuf's own
    `DecodeError` (gRPC answers it as it answers any message that does not parse)."""
    view = memoryview(data)
    try:
        rest, raw = _cut(view, RAW_INPUT_CONTENTS)
    except _Unusual:
        message = pb.ModelInferRequest.FromString(data)
        return InferCall(message, [memoryview(entry) for entry in message.raw_input_contents])
    return InferCall(pb.ModelInferRequest.FromString(b"".join(rest)), raw)


def serialize_infer_response(answer: InferAnswer | pb.ModelInferResponse) -> bytes:
    """The gRPC response serializer of ModelInfer (a generation answers a whole message)."""
    if isinstance(answer, pb.ModelInferResponse):
        return answer.SerializeToString()
    parts: list[bytes | memoryview] = [answer.message.SerializeToString()]
    tag = _varint((RAW_OUTPUT_CONTENTS << 3) | LENGTH_DELIMITED)
    for view in answer.raw:
        parts += (tag, _varint(view.nbytes), view)
    return b"".join(parts)


def _cut(view: memoryview, number: int) -> tuple[list[memoryview], list[memoryview]]:
    """The message's bytes without the length-delimited fields `number` (as runs of the
    original), and those fields' payloads, in order."""
    rest: list[memoryview] = []
    cut: list[memoryview] = []
    end = len(view)
    position = kept_from = 0
    while position < end:
        key, at = _read_varint(view, position)
        kind = key & 7
        if kind == VARINT:
            _, after = _read_varint(view, at)
        elif kind == FIXED64:
            after = at + 8
        elif kind == FIXED32:
            after = at + 4
        elif kind == LENGTH_DELIMITED:
            size, at = _read_varint(view, at)
            after = at + size
            if key >> 3 == number and after <= end:
                rest.append(view[kept_from:position])
                cut.append(view[at:after])
                kept_from = after
        else:
            raise _Unusual
        if after > end:
            raise _Unusual
        position = after
    rest.append(view[kept_from:end])
    return rest, cut


def _read_varint(view: memoryview, position: int) -> tuple[int, int]:
    """The varint at `position`, and the position after it."""
    value = shift = 0
    for index in range(position, min(position + 10, len(view))):
        byte = view[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise _Unusual


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
