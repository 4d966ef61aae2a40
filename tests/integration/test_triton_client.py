"""A stock Triton client (tritonclient.http) against inferd, unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.server import RunningServer


@pytest.fixture
def triton(server: RunningServer):  # type: ignore[no-untyped-def]
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    yield client
    client.close()


def test_triton_client_probes_and_metadata(triton) -> None:  # type: ignore[no-untyped-def]
    assert triton.is_server_live()
    assert triton.is_model_ready("affine")
    assert not triton.is_model_ready("broken")
    metadata = triton.get_model_metadata("affine")
    assert metadata["inputs"][0]["name"] == "x"
    config = triton.get_model_config("affine")
    assert config["max_batch_size"] == 8
    assert triton.get_server_metadata()["name"] == "inferd"


def test_triton_client_infers_with_json_tensors(triton) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    out = httpclient.InferRequestedOutput("y", binary_data=False)
    result = triton.infer("affine", [inp], outputs=[out], request_id="t-1")
    np.testing.assert_allclose(result.as_numpy("y"), 2 * x + 1)
    assert result.get_response()["id"] == "t-1"


def test_triton_client_sees_errors_as_exceptions(triton) -> None:  # type: ignore[no-untyped-def]
    x = np.ones((1, 5), dtype=np.float32)
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    with pytest.raises(InferenceServerException, match="dimension 1 must be 4"):
        triton.infer("affine", [inp])


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_triton_client_default_binary_tensors(triton, compression) -> None:  # type: ignore[no-untyped-def]
    a = np.array([[0.5, 1.5, 2.5], [1.0, 2.0, 3.0]], dtype=np.float32)
    b = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    tag = np.array([["héllo".encode()], [b"w"]], dtype=np.object_)
    inputs = []
    for name, value, datatype in (("a", a, "FP32"), ("b", b, "INT32"), ("tag", tag, "BYTES")):
        inp = httpclient.InferInput(name, list(value.shape), datatype)
        inp.set_data_from_numpy(value)  # binary by default
        inputs.append(inp)
    result = triton.infer(
        "multi",
        inputs,
        outputs=[httpclient.InferRequestedOutput(n) for n in ("total", "doubled", "tag_out")],
        request_compression_algorithm=compression,
    )
    np.testing.assert_allclose(result.as_numpy("total"), a + b)
    np.testing.assert_array_equal(result.as_numpy("doubled"), 2 * b)
    assert result.as_numpy("tag_out").tolist() == [["héllo".encode()], [b"w"]]
