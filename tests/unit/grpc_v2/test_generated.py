"""The checked-in code of the gRPC protocol is what its .proto files generate now, and the
messages keep the published field numbers (a client built from the published definitions
reads what inferd writes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from inferd.grpc_v2.codegen import GENERATED, PROTO, generate


def test_the_generated_code_is_current(tmp_path: Path) -> None:
    written = generate(tmp_path)
    for path in written:
        checked_in = PROTO.parent / path.name
        assert checked_in.read_bytes() == path.read_bytes(), (
            f"{checked_in.name} is stale: run python -m inferd.grpc_v2.codegen"
        )
    assert sorted(p.name for p in written) == sorted(GENERATED)


def test_inferd_and_tritonclient_share_a_process() -> None:
    """Both builds of the protocol register their messages in protobuf's one registry:
    inferd's are in its own package, so importing both works in either order."""
    triton = "import tritonclient.grpc.service_pb2 as t"
    ours = "import inferd.grpc_v2.service, inferd.grpc_v2.kserve_v2_pb2 as i"
    check = (
        "assert t.ModelInferRequest.DESCRIPTOR.full_name == 'inference.ModelInferRequest'; "
        "assert i.ModelInferRequest.DESCRIPTOR.full_name == 'inferd.kserve_v2.ModelInferRequest'"
    )
    for first, second in ((triton, ours), (ours, triton)):
        code = f"{first}; {second}; {check}"
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_the_wire_format_is_the_published_ones() -> None:
    """A request written by tritonclient's own messages parses into inferd's, field for field,
    and inferd's response parses back."""
    import numpy as np
    from tritonclient.grpc import service_pb2

    from inferd.grpc_v2 import kserve_v2_pb2 as pb

    theirs = service_pb2.ModelInferRequest(model_name="m", model_version="2", id="r1")
    tensor = theirs.inputs.add(name="x", datatype="FP16", shape=[1, 2])
    tensor.parameters["p"].int64_param = 7
    theirs.raw_input_contents.append(np.array([1, 2], np.float16).tobytes())
    theirs.parameters["timeout"].int64_param = 5
    theirs.outputs.add(name="y")
    ours = pb.ModelInferRequest.FromString(theirs.SerializeToString())
    assert (ours.model_name, ours.model_version, ours.id) == ("m", "2", "r1")
    assert ours.inputs[0].shape == [1, 2] and ours.inputs[0].parameters["p"].int64_param == 7
    assert ours.parameters["timeout"].int64_param == 5 and ours.outputs[0].name == "y"

    response = pb.ModelInferResponse(model_name="m", model_version="2", id="r1")
    out = response.outputs.add(name="y", datatype="FP32", shape=[1])
    out.parameters["q"].bool_param = True
    response.raw_output_contents.append(b"\0\0\x80\x3f")
    response.parameters["triton_final_response"].bool_param = True
    back = service_pb2.ModelInferResponse.FromString(response.SerializeToString())
    assert back.outputs[0].name == "y" and back.raw_output_contents[0] == b"\0\0\x80\x3f"
    assert back.parameters["triton_final_response"].bool_param

    config = pb.ModelConfigResponse()
    config.config.name = "m"
    config.config.max_batch_size = 8
    config.config.input.add(name="x", data_type=pb.TYPE_FP16, dims=[4])
    config.config.instance_group.add(count=2, kind=pb.ModelInstanceGroup.KIND_CPU)
    config.config.dynamic_batching.max_queue_delay_microseconds = 100
    from tritonclient.grpc import model_config_pb2  # noqa: F401  (their config's module)

    parsed = service_pb2.ModelConfigResponse.FromString(config.SerializeToString())
    assert parsed.config.input[0].data_type == 10  # TYPE_FP16
    assert parsed.config.instance_group[0].count == 2 and parsed.config.instance_group[0].kind == 2
    assert parsed.config.dynamic_batching.max_queue_delay_microseconds == 100
