"""KServe V2 over gRPC on a real inferd, with the stock clients unchanged: `tritonclient.grpc`
(sync, asyncio, and its stream for generation) and `tritonclient.http` on the same models get
the same numbers; every datatype, typed and raw contents; bad input gets the documented status,
never UNKNOWN; keys, deadlines, health, message limits and the drain apply as over HTTP."""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.generator_model import MODEL as GENERATOR
from tests.generator_model import build_generator_repo
from tests.integration.server import RunningServer, start_server
from tests.models import (
    affine_model,
    fixed_model,
    half_model,
    multi_io_model,
    slow_model,
    write_config,
)

API_KEY = "grpc-test-key"
ADMIN_KEY = "grpc-test-admin"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_generator_repo(tmp_path_factory.mktemp("grpc-repo"))
    affine_model(root / "affine" / "1" / "model.onnx")
    write_config(root / "affine", {"max_batch_size": 8})
    multi_io_model(root / "multi" / "1" / "model.onnx")
    fixed_model(root / "fixed" / "1" / "model.onnx")
    write_config(root / "fixed", {"max_batch_size": 0})
    half_model(root / "half" / "1" / "model.onnx")
    slow_model(root / "slow" / "1" / "model.onnx", layers=2000, width=256)  # ~0.1 s a row
    write_config(root / "slow", {"max_batch_size": 1, "runtime": {"intra_op_threads": 1}})
    return root


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    logs = tmp_path_factory.mktemp("grpc-logs")
    (logs / "api.keys").write_text(API_KEY + "\n")
    (logs / "admin.keys").write_text(ADMIN_KEY + "\n")
    running = start_server(
        repo,
        logs / "server.log",
        "--api-keys-file",
        str(logs / "api.keys"),
        "--admin-keys-file",
        str(logs / "admin.keys"),
        "--max-body-bytes",
        str(4 * 1024 * 1024),
    )
    yield running
    assert running.stop() == 0, running.log()


AUTH = {"authorization": f"Bearer {API_KEY}"}
"""(tritonclient.http adds its own headers to the dict it is given: give it a copy.)"""
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    assert server.grpc_target is not None
    with grpcclient.InferenceServerClient(server.grpc_target) as stock:
        yield stock


@pytest.fixture
def http_client(server: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    stock = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    yield stock
    stock.close()


def grpc_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def http_input(name: str, array: np.ndarray, datatype: str) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=True)
    return tensor


def status_of(call: Any) -> str:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return str(caught.value.status())


def test_probes_metadata_and_config_match_http(
    client: grpcclient.InferenceServerClient, http_client: httpclient.InferenceServerClient
) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("affine", headers=AUTH)
    missing = status_of(lambda: client.is_model_ready("affine", "9", headers=AUTH))
    assert missing == "StatusCode.NOT_FOUND"
    server = client.get_server_metadata(headers=AUTH, as_json=True)
    assert server["name"] == "inferd" and "binary_tensor_data" in server["extensions"]
    for model in ("affine", "multi", "fixed", "half", GENERATOR):
        over_grpc = client.get_model_metadata(model, headers=AUTH, as_json=True)
        over_http = http_client.get_model_metadata(model, headers=dict(AUTH))
        assert over_grpc["inputs"] == [
            {**t, "shape": [str(d) for d in t["shape"]]} for t in over_http["inputs"]
        ]  # (JSON of int64 fields: strings)
        assert over_grpc["versions"] == over_http["versions"]
    config = client.get_model_config("affine", headers=AUTH, as_json=True)["config"]
    assert config["name"] == "affine" and config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["dims"] == ["4"]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"


def test_every_datatype_gives_the_same_numbers_as_http(
    client: grpcclient.InferenceServerClient, http_client: httpclient.InferenceServerClient
) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    grpc_answer = client.infer("affine", [grpc_input("x", x, "FP32")], headers=AUTH)
    http_answer = http_client.infer("affine", [http_input("x", x, "FP32")], headers=dict(AUTH))
    np.testing.assert_array_equal(grpc_answer.as_numpy("y"), x * 2 + 1)
    np.testing.assert_array_equal(grpc_answer.as_numpy("y"), http_answer.as_numpy("y"))
    assert grpc_answer.get_response().model_version == "1"

    a = np.ones((2, 3), dtype=np.float32)
    b = np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int32)
    tag = np.array([["first"], ["second"]], dtype=object)
    inputs = [
        grpc_input("a", a, "FP32"),
        grpc_input("b", b, "INT32"),
        grpc_input("tag", tag, "BYTES"),
    ]
    answer = client.infer("multi", inputs, headers=AUTH)
    np.testing.assert_array_equal(answer.as_numpy("total"), a + b)
    np.testing.assert_array_equal(answer.as_numpy("doubled"), 2 * b)
    assert [t.decode() for t in answer.as_numpy("tag_out").reshape(-1)] == ["first", "second"]

    half = np.array([[0.5, 1.5, -2.0]], dtype=np.float16)
    answer = client.infer("half", [grpc_input("x", half, "FP16")], headers=AUTH)
    assert answer.as_numpy("y").dtype == np.float16
    np.testing.assert_array_equal(answer.as_numpy("y"), half + half)

    fixed = np.array([[1.0, 2.0], [3.0, 4.0]])
    answer = client.infer("fixed", [grpc_input("x", fixed, "FP64")], headers=AUTH)
    np.testing.assert_array_equal(answer.as_numpy("y"), fixed * 2)


def test_typed_contents_are_read_like_raw_ones(server: RunningServer) -> None:
    """A client that sends `contents` rather than raw bytes (KServe's own clients do)."""
    assert server.grpc_target is not None
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="multi", id="typed-1")
        a = request.inputs.add(name="a", datatype="FP32", shape=[1, 3])
        a.contents.fp32_contents.extend([0.5, 1.0, 1.5])
        b = request.inputs.add(name="b", datatype="INT32", shape=[1, 3])
        b.contents.int_contents.extend([1, 2, 3])
        tag = request.inputs.add(name="tag", datatype="BYTES", shape=[1, 1])
        tag.contents.bytes_contents.append(b"typed")
        response = stub.ModelInfer(request, metadata=tuple(AUTH.items()))
        assert response.id == "typed-1"
        names = [o.name for o in response.outputs]
        total = np.frombuffer(response.raw_output_contents[names.index("total")], "<f4")
        np.testing.assert_array_equal(total, [1.5, 3.0, 4.5])

        # contents that do not fill the shape are refused by name
        del request.inputs[0].contents.fp32_contents[:]
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(request, metadata=tuple(AUTH.items()))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "[4004]" in caught.value.details()
        assert "fp32_contents has 0" in caught.value.details()


def test_bad_requests_get_the_documented_status_never_unknown(
    client: grpcclient.InferenceServerClient,
) -> None:
    x = np.zeros((1, 4), dtype=np.float32)
    assert status_of(lambda: client.infer("nope", [grpc_input("x", x, "FP32")], headers=AUTH)) == (
        "StatusCode.NOT_FOUND"
    )
    wrong_shape = np.zeros((1, 5), dtype=np.float32)
    assert (
        status_of(
            lambda: client.infer("affine", [grpc_input("x", wrong_shape, "FP32")], headers=AUTH)
        )
        == "StatusCode.INVALID_ARGUMENT"
    )
    wrong_type = np.zeros((1, 4), dtype=np.int64)
    assert (
        status_of(
            lambda: client.infer("affine", [grpc_input("x", wrong_type, "INT64")], headers=AUTH)
        )
        == "StatusCode.INVALID_ARGUMENT"
    )
    # no key, a wrong key: UNAUTHENTICATED; an inference key on an admin RPC: the same
    assert status_of(lambda: client.infer("affine", [grpc_input("x", x, "FP32")])) == (
        "StatusCode.UNAUTHENTICATED"
    )
    bad = {"authorization": "Bearer nope"}
    assert status_of(lambda: client.get_model_metadata("affine", headers=bad)) == (
        "StatusCode.UNAUTHENTICATED"
    )
    assert status_of(lambda: client.unload_model("affine", headers=AUTH)) == (
        "StatusCode.UNAUTHENTICATED"
    )
    # over the message limit (4 MiB here)
    huge = np.zeros((330_000, 4), dtype=np.float32)  # 5.3 MB
    assert status_of(
        lambda: client.infer("affine", [grpc_input("x", huge, "FP32")], headers=AUTH)
    ) == ("StatusCode.RESOURCE_EXHAUSTED")


def test_the_error_keeps_its_code_and_request_id(server: RunningServer) -> None:
    assert server.grpc_target is not None
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="affine")
        request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        call = stub.ModelInfer.with_call
        with pytest.raises(grpc.RpcError) as caught:
            call(request, metadata=(*AUTH.items(), ("x-request-id", "grpc-req-7")))
        trailing = dict(caught.value.trailing_metadata())
        assert trailing["inferd-code"] == "4004" and trailing["x-request-id"] == "grpc-req-7"


def test_the_deadline_of_the_call_is_the_requests(client: grpcclient.InferenceServerClient) -> None:
    x = np.full((1, 256), 0.5, dtype=np.float32)
    started = time.monotonic()
    status = status_of(
        lambda: client.infer(
            "slow", [grpc_input("x", x, "FP32")], headers=AUTH, client_timeout=0.001
        )
    )
    assert status == "StatusCode.DEADLINE_EXCEEDED"
    assert time.monotonic() - started < 2
    # a generous deadline is met
    answer = client.infer("slow", [grpc_input("x", x, "FP32")], headers=AUTH, client_timeout=30)
    assert answer.as_numpy("y").shape == (1, 256)


def test_the_asyncio_client(server: RunningServer) -> None:
    async def run() -> list[np.ndarray]:
        assert server.grpc_target is not None
        async with grpcaio.InferenceServerClient(server.grpc_target) as stock:
            assert await stock.is_server_ready()
            calls = []
            for i in range(8):
                x = np.full((1, 4), i, dtype=np.float32)
                tensor = grpcaio.InferInput("x", [1, 4], "FP32")
                tensor.set_data_from_numpy(x)
                calls.append(stock.infer("affine", [tensor], headers=AUTH))
            return [r.as_numpy("y") for r in await asyncio.gather(*calls)]

    for i, y in enumerate(asyncio.run(run())):
        np.testing.assert_array_equal(y, np.full((1, 4), 2 * i + 1))


def prompt_input(text: str) -> grpcclient.InferInput:
    return grpc_input("text_input", np.array([text], dtype=object), "BYTES")


def test_streamed_generation_is_one_response_per_token_in_order(
    server: RunningServer, client: grpcclient.InferenceServerClient
) -> None:
    prompt = "def parse(value):"
    answer = httpx.post(
        f"{server.url}/generate",
        json={"prompt": prompt, "max_length": 12, "temperature": 0},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    whole = answer.json()
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: answers.put((result, error)), headers=AUTH)
    try:
        client.async_stream_infer(
            GENERATOR,
            [prompt_input(prompt)],
            request_id="gen-1",
            parameters={"max_tokens": 12, "temperature": 0},
            enable_empty_final_response=True,
        )
        pieces: list[str] = []
        while True:
            result, error = answers.get(timeout=60)
            assert error is None, error
            response = result.get_response()
            assert response.id == "gen-1"
            final = response.parameters["triton_final_response"].bool_param
            if final:
                assert response.parameters["finish_reason"].string_param == "length"
                assert response.parameters["completion_tokens"].int64_param == 12
                break
            pieces.append(result.as_numpy("text_output")[0].decode())
    finally:
        client.stop_stream()
    assert len(pieces) >= 10  # one per token (a token that ends mid-character waits for the next)
    assert "".join(pieces) == whole["text"]

    # the whole text in one ModelInfer, the same as HTTP's
    answer = client.infer(
        GENERATOR,
        [prompt_input(prompt)],
        headers=AUTH,
        parameters={"max_tokens": 12, "temperature": 0},
    )
    assert answer.as_numpy("text_output")[0].decode() == whole["text"]


def test_a_generators_metadata_is_the_interface_a_client_uses(
    server: RunningServer,
    client: grpcclient.InferenceServerClient,
    http_client: httpclient.InferenceServerClient,
) -> None:
    """ModelMetadata lists the prompt and the text (Triton's generate interface), not the
    decoder's tensors; those stay in the model configuration. A client that builds its request
    from the metadata alone gets its text."""
    over_grpc = client.get_model_metadata(GENERATOR, headers=AUTH, as_json=True)
    assert over_grpc["inputs"] == [{"name": "text_input", "datatype": "BYTES", "shape": ["1"]}]
    assert over_grpc["outputs"] == [{"name": "text_output", "datatype": "BYTES", "shape": ["1"]}]
    over_http = http_client.get_model_metadata(GENERATOR, headers=dict(AUTH))
    assert over_http["inputs"] == [{"name": "text_input", "datatype": "BYTES", "shape": [1]}]
    assert over_http["outputs"] == [{"name": "text_output", "datatype": "BYTES", "shape": [1]}]
    parameters = {(p["name"], p["direction"]): p["type"] for p in over_http["parameters"]}
    assert parameters[("max_tokens", "request")] == "int64"
    assert parameters[("temperature", "request")] == "double"
    assert parameters[("stop", "request")] == "string"
    assert parameters[("triton_final_response", "response")] == "bool"
    assert parameters[("finish_reason", "response")] == "string"

    config = client.get_model_config(GENERATOR, headers=AUTH, as_json=True)["config"]
    graph_inputs = {t["name"] for t in config["input"]}
    graph_outputs = {t["name"] for t in config["output"]}
    assert "input_ids" in graph_inputs
    assert any(name.startswith("past_key_values") for name in graph_inputs)
    assert "text_input" not in graph_inputs and "text_output" not in graph_outputs
    http_config = httpx.get(f"{server.url}/v2/models/{GENERATOR}/config", headers=AUTH).json()
    assert {t["name"] for t in http_config["input"]} == graph_inputs

    inputs = []
    for tensor in over_grpc["inputs"]:  # the request as the metadata describes it
        shape = [int(d) for d in tensor["shape"]]
        data = np.array(["def parse(value):"], dtype=object).reshape(shape)
        inputs.append(grpc_input(tensor["name"], data, tensor["datatype"]))
    answer = client.infer(GENERATOR, inputs, headers=AUTH, parameters={"max_tokens": 4})
    text = answer.as_numpy(over_grpc["outputs"][0]["name"])
    assert text.shape == (1,) and text[0].decode()
    assert answer.get_response().parameters["completion_tokens"].int64_param == 4


def test_without_an_empty_final_response_the_last_token_is_flagged(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: answers.put((result, error)), headers=AUTH)
    try:
        client.async_stream_infer(
            GENERATOR,
            [prompt_input("class Parser:")],
            parameters={"max_tokens": 6, "temperature": 0},
        )
        flags = []
        while not flags or not flags[-1]:
            result, error = answers.get(timeout=60)
            assert error is None, error
            response = result.get_response()
            assert len(response.outputs) == 1  # every response carries a token
            flags.append(response.parameters["triton_final_response"].bool_param)
    finally:
        client.stop_stream()
    assert flags[-1] and not any(flags[:-1])


def test_a_cancelled_stream_stops_its_generation(
    server: RunningServer, client: grpcclient.InferenceServerClient
) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: answers.put((result, error)), headers=AUTH)
    client.async_stream_infer(
        GENERATOR,
        [prompt_input("import os")],
        parameters={"max_tokens": 900, "temperature": 0, "ignore_eos": True},
    )
    answers.get(timeout=60)  # it runs
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ready = httpx.get(f"{server.url}/ready", timeout=5).json()
        if ready["in_flight"] == 0:
            break
        time.sleep(0.05)
    assert ready["in_flight"] == 0  # the slot is free long before 900 tokens


def test_a_stream_request_that_fails_gets_an_error_and_the_stream_goes_on(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(lambda result, error: answers.put((result, error)), headers=AUTH)
    try:
        client.async_stream_infer("nope", [prompt_input("x")], request_id="bad")
        x = np.ones((1, 4), dtype=np.float32)
        client.async_stream_infer("affine", [grpc_input("x", x, "FP32")], request_id="good")
        seen = {}
        for _ in range(2):
            result, error = answers.get(timeout=60)
            if error is not None:
                seen["bad"] = str(error)
            else:
                seen[result.get_response().id] = result.as_numpy("y")
    finally:
        client.stop_stream()
    assert "[4040]" in seen["bad"]
    np.testing.assert_array_equal(seen["good"], np.full((1, 4), 3.0))


def test_statistics_repository_and_health(
    server: RunningServer, client: grpcclient.InferenceServerClient
) -> None:
    stats = client.get_inference_statistics("affine", headers=AUTH, as_json=True)
    assert int(stats["model_stats"][0]["inference_count"]) > 0
    index = client.get_model_repository_index(headers=AUTH, as_json=True)
    assert {"affine", "multi", GENERATOR} <= {m["name"] for m in index["models"]}
    client.unload_model("fixed", headers=ADMIN)
    gone = status_of(lambda: client.is_model_ready("fixed", headers=AUTH))
    assert gone == "StatusCode.NOT_FOUND"  # as HTTP's 404 for an unloaded model
    client.load_model("fixed", headers=ADMIN)
    assert client.is_model_ready("fixed", headers=AUTH)
    assert server.grpc_target is not None
    with grpc.insecure_channel(server.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        assert health.Check(health_pb2.HealthCheckRequest()).status == serving
        assert health.Check(health_pb2.HealthCheckRequest(service="affine")).status == serving
        with pytest.raises(grpc.RpcError) as caught:
            health.Check(health_pb2.HealthCheckRequest(service="nope"))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_grpc_calls_are_counted_and_logged_like_http(server: RunningServer) -> None:
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert (
        'inferd_requests_total{code="0",endpoint="/inference.GRPCInferenceService/ModelInfer",'
        'model="affine",status="200"}' in metrics
    )
    assert '"method": "gRPC"' in server.log() or '"method":"gRPC"' in server.log()


def test_sigterm_drains_grpc_with_http(repo: Path, tmp_path: Path) -> None:
    running = start_server(repo, tmp_path / "server.log", "--drain-grace-s", "0")
    assert running.grpc_target is not None
    with grpcclient.InferenceServerClient(running.grpc_target) as stock:
        results: queue.Queue[Any] = queue.Queue()
        stock.async_infer(
            GENERATOR,
            [prompt_input("def main():")],
            lambda result, error: results.put((result, error)),
            parameters={"max_tokens": 300, "temperature": 0, "ignore_eos": True},
        )
        deadline = time.monotonic() + 30
        while httpx.get(f"{running.url}/ready", timeout=5).json()["in_flight"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        running.process.send_signal(signal.SIGTERM)
        result, error = results.get(timeout=60)
    assert error is None, error
    response = result.get_response()
    assert response.parameters["completion_tokens"].int64_param == 300  # finished, not cut
    assert running.process.wait(30) == 0
    assert '"drain finished","complete":true' in running.log()


def test_a_busy_grpc_port_is_one_line(repo: Path, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "inferd",
                "serve",
                "--repo",
                str(repo),
                "--port",
                "0",
                "--grpc-port",
                port,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 3
    assert result.stderr.strip() == (
        f"inferd: cannot listen on 127.0.0.1:{port}: address already in use "
        "(another server there? --grpc-port chooses another)"
    )


def test_the_drain_ends_in_its_bound_with_streams_and_grpc_calls_and_counts_them(
    repo: Path, tmp_path: Path
) -> None:
    """HTTP streams and gRPC generations in flight, more than the drain's 0.5 s lets finish
    (twice the generator's 8 running sequences, 480 tokens each): the process is gone within
    the timeout + 2 s, every call answered (done, or 5030), and the drain's log line counts
    what happened."""
    each = 8
    running = start_server(repo, tmp_path / "server.log", "--drain-timeout-s", "0.5")
    assert running.grpc_target is not None
    body = {
        "prompt": "Keep going",
        "max_length": 480,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }

    def stream() -> str:  # "done", or the error event's code
        with (
            httpx.Client(base_url=running.url, timeout=60) as http,
            http.stream("POST", "/generate", json=body) as answer,
        ):
            last = ""
            for line in answer.iter_lines():
                if line.startswith("event: "):
                    last = line.removeprefix("event: ")
                elif line.startswith("data: ") and last == "error":
                    return str(json.loads(line.removeprefix("data: "))["code"])
            return last

    results: queue.Queue[Any] = queue.Queue()
    with (
        grpcclient.InferenceServerClient(running.grpc_target) as stock,
        ThreadPoolExecutor(each) as pool,
    ):
        streams = [pool.submit(stream) for _ in range(each)]
        for _ in range(each):
            stock.async_infer(
                GENERATOR,
                [prompt_input("def main():")],
                lambda result, error: results.put((result, error)),
                parameters={"max_tokens": 480, "temperature": 0, "ignore_eos": True},
            )
        deadline = time.monotonic() + 30
        while httpx.get(f"{running.url}/ready", timeout=5).json()["in_flight"] < 2 * each:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        running.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = running.process.wait(30)
        elapsed = time.monotonic() - signalled
        http_endings = [s.result(timeout=30) for s in streams]
        grpc_endings = [results.get(timeout=30) for _ in range(each)]
    assert code == 0, running.log()
    assert elapsed < 0.5 + 2, f"the process took {elapsed:.1f} s to exit"
    assert set(http_endings) <= {"done", "5030"}, http_endings
    cut = http_endings.count("5030")
    for _result, error in grpc_endings:
        if error is not None:
            assert error.status() == "StatusCode.UNAVAILABLE", error
            cut += 1
    drained = [
        json.loads(line) for line in running.log().splitlines() if '"drain finished"' in line
    ]
    assert len(drained) == 1, drained
    # the first 8 rows run while the next 8 wait: on a loaded machine the first may reach
    # their last token between the test's last look at /ready and the signal's handling
    assert each <= drained[0]["in_flight_at_signal"] <= 2 * each, drained[0]
    assert cut > 0 and drained[0]["answered_5030"] == cut, (drained[0], http_endings)
    assert drained[0]["complete"] is False and drained[0]["forced"] is False
