"""Property-based fuzzing of every endpoint against the server's own OpenAPI schema
(schemathesis), and hand-made hostile bodies: no 5xx, no answer outside the schema."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.server import RunningServer, start_server
from tests.models import build_repository

CHECKS = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
)


@pytest.fixture(scope="module")
def healthy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("fuzz-repo")
    build_repository(root)
    shutil.rmtree(root / "broken")  # every probe answers 200: any 5xx is then a defect
    server = start_server(root, tmp_path_factory.mktemp("fuzz-logs") / "server.log")
    yield server
    assert server.stop() == 0


def test_every_endpoint_survives_generated_requests(healthy_server: RunningServer) -> None:
    """Each operation of /openapi.json gets generated requests (valid and not); every answer
    must be a non-5xx that the schema documents."""
    schema = schemathesis.openapi.from_url(healthy_server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20

    for operation in operations:

        @settings(
            max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(case=operation.as_strategy())
        def exercise(case: Any) -> None:
            response = case.call(timeout=30)
            case.validate_response(response, checks=CHECKS)

        exercise()


def post(client: httpx.Client, content: bytes, **headers: str) -> httpx.Response:
    return client.post("/v2/models/affine/infer", content=content, headers=headers)


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (b"{", {}),
        (b"null", {}),
        (b'"just a string"', {}),
        (b"[" * 5000 + b"]" * 5000, {}),  # deep nesting
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [NaN, 1, 2, 3]}]}',
            {},
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [Infinity, 1, 2, 3]}]}',
            {},
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1e400, 1, 2, 3]}]}',
            {},
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1e39, 1, 2, 3]}]}',
            {},
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [123456789012345678901234567890]}]}',
            {},
        ),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [99999999999, 99999999999], "data": [1]}]}',
            {},
        ),
        (b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": {"a": 1}}]}', {}),
        (
            b"--boundary\r\nContent-Disposition: form-data\r\n\r\nx\r\n--boundary--",
            {"content-type": "multipart/form-data; boundary=boundary"},
        ),
        (b"x=1&y=2", {"content-type": "application/x-www-form-urlencoded"}),
        (b'{"inputs": []}', {"content-encoding": "br"}),
        (b"not gzip at all", {"content-encoding": "gzip"}),
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]}',
            {"inference-header-content-length": "abc"},
        ),
    ],
)
def test_hostile_bodies_get_a_4xx_with_a_code(
    client: httpx.Client, content: bytes, headers: dict[str, str]
) -> None:
    response = post(client, content, **headers)
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    assert isinstance(body["code"], int) and body["request_id"]
    assert "Traceback" not in response.text and "/work" not in response.text


def test_nan_in_binary_tensors_runs(client: httpx.Client) -> None:
    import numpy as np

    x = np.array([[np.nan, np.inf, -np.inf, 1.0]], dtype=np.float32)
    header = (
        b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], '
        b'"parameters": {"binary_data_size": 16}}]}'
    )
    response = post(
        client, header + x.tobytes(), **{"inference-header-content-length": str(len(header))}
    )
    assert response.status_code == 200
    assert response.json()["outputs"][0]["data"][3] == 3.0  # non-finite values come back as null
