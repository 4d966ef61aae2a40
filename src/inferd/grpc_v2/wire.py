"""ModelInfer's two messages on the wire without copying their tensors.

Protobuf would copy a request's `raw_input_contents` twice (into its message, then out as a
`bytes` per entry) and a response's `raw_output_contents` three times (`tobytes`, into the
message, into the serialized string): on a 1 MB tensor that is most of the server's work. The
encoding allows better. A message is a sequence of fields, and a repeated field's entries may
stand anywhere in it; so a request's raw entries are cut out of the received bytes as views
while its fields are counted (inferd.grpc_v2.message_scan; the rest goes to protobuf), and a
response is protobuf's serialization of everything else followed by one `raw_output_contents`
entry per output, written from the arrays' own memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.message_scan import LENGTH_DELIMITED, varint_bytes, walk

RAW_INPUT_CONTENTS = 7
"""Field number of `ModelInferRequest.raw_input_contents`."""
INPUTS, CONTENTS = 5, 5
"""Field numbers of `ModelInferRequest.inputs` and `InferInputTensor.contents`."""
FP32_CONTENTS, FP64_CONTENTS = 6, 7
"""Field numbers of `InferTensorContents.fp32_contents` and `fp64_contents`."""
REQUEST_PLAN = {
    RAW_INPUT_CONTENTS: None,
    INPUTS: {CONTENTS: {FP32_CONTENTS: None, FP64_CONTENTS: None}},
}
"""What a request's walk takes out of it: the raw contents, and the typed floating-point
contents (packed: a block of little-endian numbers, read as an array of the received bytes
instead of a list of Python floats)."""
RAW_OUTPUT_CONTENTS = 6
"""Field number of `ModelInferResponse.raw_output_contents`."""


@dataclass(slots=True)
class InferCall:
    """A received `ModelInferRequest`: its fields but the raw contents, and those as views of
    the received bytes (one per input, in order)."""

    message: pb.ModelInferRequest
    raw: Sequence[memoryview] = ()
    size: int = 0
    """The received message's bytes."""
    packed: Mapping[tuple[int, int], Sequence[memoryview]] = field(default_factory=dict)
    """Packed floating-point contents cut out of the inputs, by (input index, field number
    of `InferTensorContents`), in the order they came."""


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


def parse_infer_request(data: bytes, budget: int) -> InferCall:
    """A `ModelInferRequest` within `budget` fields (inferd.grpc_v2.message_scan), its raw contents
    cut out as views. Raises `scan.Malformed` or `scan.OverBudget`; protobuf's `DecodeError`
    for what only its parser finds wrong (a string that is not UTF-8)."""
    walked = walk(data, pb.ModelInferRequest.DESCRIPTOR, budget, REQUEST_PLAN)
    message = pb.ModelInferRequest.FromString(b"".join(walked.rest))
    return InferCall(message, walked.cut, len(data), walked.nested)


def serialize_infer_response(answer: InferAnswer | pb.ModelInferResponse) -> bytes:
    """The gRPC response serializer of ModelInfer (a generation answers a whole message)."""
    if isinstance(answer, pb.ModelInferResponse):
        return answer.SerializeToString()
    parts: list[bytes | memoryview] = [answer.message.SerializeToString()]
    tag = varint_bytes((RAW_OUTPUT_CONTENTS << 3) | LENGTH_DELIMITED)
    for view in answer.raw:
        parts += (tag, varint_bytes(view.nbytes), view)
    return b"".join(parts)
