"""KServe V2 REST against a real `inferd serve` on 127.0.0.1 with real ONNX models."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest


def infer_body(*inputs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"inputs": list(inputs), **extra}


def fp32(name: str, array: np.ndarray) -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": list(array.shape), "data": array.tolist()}


def int64(name: str, array: np.ndarray) -> dict[str, Any]:
    return {"name": name, "datatype": "INT64", "shape": list(array.shape), "data": array.tolist()}


def outputs_by_name(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["name"]: o for o in body["outputs"]}


def assert_error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert isinstance(body["error"], str) and body["error"]
    assert body["request_id"] == response.headers["x-request-id"]
    assert "Traceback" not in response.text
    return body


# -- probes and metadata -------------------------------------------------------------------


def test_liveness_answers_200(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    assert client.get("/v2/health/live").status_code == 200


def test_readiness_is_503_and_names_the_broken_model(client: httpx.Client) -> None:
    for path in ("/ready", "/v2/health/ready"):
        response = client.get(path)
        assert response.status_code == 503
        body = response.json()
        assert body["ready"] is False
        assert "broken" in body["reason"]
        assert body["models"]["affine"]["ready"] is True
        assert body["models"]["broken"]["ready"] is False
        assert (
            "/"
            not in body["models"]["broken"]["versions"]["1"]["reason"].split("model.onnx")[0][-1:]
        )


def test_server_metadata(client: httpx.Client) -> None:
    body = client.get("/v2").json()
    assert body["name"] == "inferd" and "version" in body and isinstance(body["extensions"], list)


def test_model_metadata_is_read_from_the_onnx_file(client: httpx.Client) -> None:
    body = client.get("/v2/models/sequence").json()
    assert body["name"] == "sequence"
    assert body["platform"] == "onnxruntime_onnx"
    assert body["versions"] == ["1"]
    assert {i["name"]: (i["datatype"], i["shape"]) for i in body["inputs"]} == {
        "input_ids": ("INT64", [-1, -1]),
        "attention_mask": ("INT64", [-1, -1]),
    }
    assert {o["name"]: (o["datatype"], o["shape"]) for o in body["outputs"]} == {
        "hidden": ("FP32", [-1, -1, 2]),
        "pooled": ("FP32", [-1]),
    }


def test_version_metadata_and_readiness(client: httpx.Client) -> None:
    assert client.get("/v2/models/affine").json()["versions"] == ["1", "2"]
    assert client.get("/v2/models/affine/versions/1").status_code == 200
    assert client.get("/v2/models/affine/ready").status_code == 200
    assert client.get("/v2/models/affine/versions/2/ready").status_code == 200
    assert client.get("/v2/models/broken/ready").status_code == 503
    assert_error(client.get("/v2/models/affine/versions/9"), 404, 4040)
    assert_error(client.get("/v2/models/nope"), 404, 4040)
    assert_error(client.get("/v2/models/nope/ready"), 404, 4040)


def test_model_config_in_tritons_shape(client: httpx.Client) -> None:
    body = client.get("/v2/models/affine/config").json()
    assert body["max_batch_size"] == 8
    assert body["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}]
    assert "dynamic_batching" in body


# -- inference -----------------------------------------------------------------------------


def test_infer_affine_with_id_echo_and_request_id(client: httpx.Client) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    response = client.post(
        "/v2/models/affine/infer",
        json=infer_body(fp32("x", x), id="abc"),
        headers={"X-Request-ID": "req-123"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "req-123"
    body = response.json()
    assert body["model_name"] == "affine" and body["model_version"] == "2" and body["id"] == "abc"
    (y,) = body["outputs"]
    assert y["name"] == "y" and y["datatype"] == "FP32" and y["shape"] == [2, 4]
    np.testing.assert_allclose(np.array(y["data"]).reshape(2, 4), 2 * x + 1)


def test_infer_a_named_version(client: httpx.Client) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    body = client.post("/v2/models/affine/versions/1/infer", json=infer_body(fp32("x", x))).json()
    assert body["model_version"] == "1"


def test_nested_and_flat_data_give_the_same_answer(client: httpx.Client) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    flat = {"name": "x", "datatype": "FP32", "shape": [2, 4], "data": x.ravel().tolist()}
    a = client.post("/v2/models/affine/infer", json=infer_body(flat)).json()
    b = client.post("/v2/models/affine/infer", json=infer_body(fp32("x", x))).json()
    assert a["outputs"] == b["outputs"]


def test_several_inputs_and_outputs_with_output_selection(client: httpx.Client) -> None:
    body = infer_body(
        fp32("a", np.array([[0.5, 1.5, 2.5]], dtype=np.float32)),
        {"name": "b", "datatype": "INT32", "shape": [1, 3], "data": [1, 2, 3]},
        {"name": "tag", "datatype": "BYTES", "shape": [1, 1], "data": ["héllo wörld"]},
        outputs=[{"name": "tag_out"}, {"name": "doubled"}],
    )
    response = client.post("/v2/models/multi/infer", json=body)
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    assert [o["name"] for o in outputs] == ["tag_out", "doubled"]
    by_name = {o["name"]: o for o in outputs}
    assert by_name["doubled"]["datatype"] == "INT32" and by_name["doubled"]["data"] == [2, 4, 6]
    assert by_name["tag_out"]["datatype"] == "BYTES"
    assert by_name["tag_out"]["data"] == ["héllo wörld"]


def test_model_without_batch_axis(client: httpx.Client) -> None:
    x = {"name": "x", "datatype": "FP64", "shape": [2, 2], "data": [1, 2, 3, 4]}
    body = client.post("/v2/models/fixed/infer", json=infer_body(x)).json()
    assert body["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]
    wrong = {"name": "x", "datatype": "FP64", "shape": [1, 2, 2], "data": [1, 2, 3, 4]}
    assert_error(client.post("/v2/models/fixed/infer", json=infer_body(wrong)), 400, 4004)


def test_no_content_type_is_accepted(client: httpx.Client) -> None:
    content = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
    response = client.post("/v2/models/affine/infer", content=content, headers={})
    assert response.status_code == 200


def test_variable_length_requests_batched_together_match_their_solo_answers(
    client: httpx.Client,
) -> None:
    rng = np.random.default_rng(3)
    requests = []
    for _ in range(48):
        rows, length = int(rng.integers(1, 4)), int(rng.integers(1, 12))
        ids = rng.integers(1, 100, size=(rows, length))
        mask = (rng.random((rows, length)) > 0.2).astype(np.int64)
        requests.append((ids, mask))

    def call(pair: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
        ids, mask = pair
        response = client.post(
            "/v2/models/sequence/infer",
            json=infer_body(int64("input_ids", ids), int64("attention_mask", mask)),
        )
        assert response.status_code == 200, response.text
        return outputs_by_name(response.json())

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, requests))
    for (ids, mask), out in zip(requests, answers, strict=True):
        rows, length = ids.shape
        hidden = np.array(out["hidden"]["data"], dtype=np.float32).reshape(out["hidden"]["shape"])
        assert out["hidden"]["shape"] == [rows, length, 2]
        np.testing.assert_array_equal(hidden[..., 0], ids)
        np.testing.assert_array_equal(hidden[..., 1], mask)
        np.testing.assert_array_equal(out["pooled"]["data"], (ids * mask).sum(axis=1))


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            infer_body({"name": "x", "datatype": "INT64", "shape": [1, 4], "data": [1, 2, 3, 4]}),
            "expected datatype FP32",
        ),
        (
            infer_body({"name": "x", "datatype": "FP32", "shape": [1, 5], "data": [1] * 5}),
            "dimension 1 must be 4",
        ),
        (infer_body({"name": "x", "datatype": "FP32", "shape": [4], "data": [1] * 4}), "rank"),
        (
            infer_body({"name": "z", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}),
            "missing input",
        ),
        (
            infer_body({"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 3}),
            "needs 4 elements",
        ),
        (
            infer_body(
                {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4},
                outputs=[{"name": "nope"}],
            ),
            "unknown output",
        ),
        ({"inputs": "x"}, "inputs"),
        ({}, "inputs"),
    ],
)
def test_bad_requests_get_4004_with_a_clear_message(
    client: httpx.Client, body: dict[str, Any], fragment: str
) -> None:
    response = client.post("/v2/models/affine/infer", json=body)
    error = assert_error(response, 400, 4004)
    assert fragment in error["error"]


def test_empty_batch_is_4001(client: httpx.Client) -> None:
    body = infer_body({"name": "x", "datatype": "FP32", "shape": [0, 4], "data": []})
    assert_error(client.post("/v2/models/affine/infer", json=body), 400, 4001)


def test_malformed_json_and_non_utf8(client: httpx.Client) -> None:
    assert_error(client.post("/v2/models/affine/infer", content=b"{not json"), 400, 4004)
    assert_error(client.post("/v2/models/affine/infer", content=b'{"id":"\xff"}'), 400, 4003)


def test_unknown_model_version_and_failed_model(client: httpx.Client) -> None:
    x = fp32("x", np.ones((1, 4), dtype=np.float32))
    assert_error(client.post("/v2/models/nope/infer", json=infer_body(x)), 404, 4040)
    assert_error(client.post("/v2/models/affine/versions/7/infer", json=infer_body(x)), 404, 4040)
    assert_error(client.post("/v2/models/affine/versions/x1/infer", json=infer_body(x)), 404, 4040)
    assert_error(client.post("/v2/models/broken/infer", json=infer_body(x)), 503, 5030)


def test_path_traversal_in_model_name_is_not_found(client: httpx.Client) -> None:
    x = fp32("x", np.ones((1, 4), dtype=np.float32))
    response = client.post("/v2/models/..%2F..%2Fetc/infer", json=infer_body(x))
    assert response.status_code == 404


def test_body_over_the_limit_is_413_code_4002(client: httpx.Client) -> None:
    x = fp32("x", np.ones((20_000, 4), dtype=np.float32))
    assert_error(client.post("/v2/models/affine/infer", json=infer_body(x)), 413, 4002)


def test_streamed_body_over_the_limit_is_413_too(client: httpx.Client) -> None:
    def chunks() -> Any:  # no Content-Length: chunked transfer encoding
        yield b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":['
        for _ in range(30):
            yield b"1.0," * 2_000
        yield b"1.0]}]}"

    assert_error(client.post("/v2/models/affine/infer", content=chunks()), 413, 4002)


def test_timeout_header_and_parameter_are_validated(client: httpx.Client) -> None:
    x = fp32("x", np.ones((1, 4), dtype=np.float32))
    bad = client.post(
        "/v2/models/affine/infer", json=infer_body(x), headers={"X-Request-Timeout-Ms": "soon"}
    )
    assert_error(bad, 400, 4004)
    bad_param = client.post(
        "/v2/models/affine/infer", json=infer_body(x, parameters={"timeout": -5})
    )
    assert_error(bad_param, 400, 4004)
    ok = client.post(
        "/v2/models/affine/infer", json=infer_body(x), headers={"X-Request-Timeout-Ms": "5000"}
    )
    assert ok.status_code == 200


def test_unknown_route_and_wrong_method(client: httpx.Client) -> None:
    assert_error(client.get("/v2/nothing/here"), 404, 4040)
    wrong = client.get("/v2/models/affine/infer")
    assert_error(wrong, 405, 4004)
    assert wrong.headers["allow"] == "POST"
    assert wrong.json()["error"] == "GET is not a method of /v2/models/affine/infer; it takes POST"
    openai = client.delete("/v1/embeddings")  # in OpenAI's shape, a client's error
    assert openai.status_code == 405 and openai.headers["allow"] == "POST"
    assert openai.json()["error"]["type"] == "invalid_request_error"
    assert openai.json()["error"]["code"] == 4004


def test_invalid_request_id_header_is_replaced(client: httpx.Client) -> None:
    response = client.get("/health", headers={"X-Request-ID": "bad id with spaces"})
    assert response.headers["x-request-id"] != "bad id with spaces"
    assert len(response.headers["x-request-id"]) == 24


def test_statistics_count_what_was_sent(client: httpx.Client) -> None:
    def snapshot() -> dict[str, Any]:
        body = client.get("/v2/models/affine/versions/1/stats").json()
        (stats,) = body["model_stats"]
        return dict(stats)

    before = snapshot()
    x = fp32("x", np.ones((3, 4), dtype=np.float32))
    for _ in range(5):
        assert (
            client.post("/v2/models/affine/versions/1/infer", json=infer_body(x)).status_code == 200
        )
    bad = {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3]}
    assert (
        client.post("/v2/models/affine/versions/1/infer", json=infer_body(bad)).status_code == 400
    )
    after = snapshot()
    assert after["name"] == "affine" and after["version"] == "1"
    assert after["inference_count"] - before["inference_count"] == 15
    assert 1 <= after["execution_count"] - before["execution_count"] <= 5
    success = after["inference_stats"]["success"]
    assert success["count"] - before["inference_stats"]["success"]["count"] == 5
    assert success["ns"] > before["inference_stats"]["success"]["ns"]
    assert after["batch_stats"] and all(b["batch_size"] >= 1 for b in after["batch_stats"])
    # no max_batch_tokens configured, and a batch size is learned only under load: no cap
    assert after["batch_token_cap"] is None
    every = client.get("/v2/models/stats").json()["model_stats"]
    assert {(s["name"], s["version"]) for s in every} >= {("affine", "1"), ("affine", "2")}
    assert_error(client.get("/v2/models/nope/stats"), 404, 4040)
