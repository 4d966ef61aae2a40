"""Reliability and security against real servers: fault isolation with a poisoned model, API
and admin keys, versions that fail to load, admission limits."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.server import RunningServer, start_server, wait_loaded_models
from tests.models import affine_model, lookup_model, slow_model, write_config


def idx_body(value: int) -> dict[str, Any]:
    return {"inputs": [{"name": "idx", "datatype": "INT64", "shape": [1, 1], "data": [[value]]}]}


def test_a_poisoned_item_fails_alone_in_its_batch(tmp_path: Path) -> None:
    lookup_model(tmp_path / "lookup" / "1" / "model.onnx")
    write_config(tmp_path / "lookup", {"max_batch_size": 16})
    server = start_server(tmp_path, tmp_path / "log")
    try:
        values = [i % 10 for i in range(40)]
        values[7] = values[23] = 99  # past the table: ONNX Runtime fails any batch holding it
        limits = httpx.Limits(max_connections=40)
        with (
            httpx.Client(base_url=server.url, timeout=30, limits=limits) as client,
            ThreadPoolExecutor(40) as pool,
        ):
            responses = list(
                pool.map(lambda v: client.post("/v2/models/lookup/infer", json=idx_body(v)), values)
            )
            stats = client.get("/v2/models/lookup/stats").json()["model_stats"][0]
            ready = client.get("/ready")
        for value, response in zip(values, responses, strict=True):
            if value == 99:
                assert response.status_code == 400 and response.json()["code"] == 4004
            else:
                assert response.status_code == 200, response.text
                assert response.json()["outputs"][0]["data"] == [2.0 * value, 2.0 * value + 1]
        assert stats["inference_stats"]["success"]["count"] == 38
        assert ready.status_code == 200  # bad inputs never make the model unhealthy
    finally:
        assert server.stop() == 0


def keyed_server(tmp_path: Path, admin: bool = True) -> RunningServer:
    affine_model(tmp_path / "repo" / "affine" / "1" / "model.onnx")
    (tmp_path / "api.keys").write_text("# inference keys\nkey-one\nkey-two\n")
    (tmp_path / "admin.keys").write_text("admin-secret\n")
    args = ["--api-keys-file", str(tmp_path / "api.keys")]
    if admin:
        args += ["--admin-keys-file", str(tmp_path / "admin.keys")]
    return start_server(tmp_path / "repo", tmp_path / "log", *args)


def x_body() -> dict[str, Any]:
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def test_api_keys_guard_inference_and_admin_keys_guard_changes(tmp_path: Path) -> None:
    server = keyed_server(tmp_path)
    url = server.url
    try:
        assert httpx.get(url + "/health").status_code == 200  # probes stay open
        assert httpx.get(url + "/ready").status_code == 200
        assert httpx.get(url + "/metrics").status_code == 200
        bare = httpx.post(url + "/v2/models/affine/infer", json=x_body())
        assert bare.status_code == 401 and bare.json()["code"] == 4010
        assert bare.headers["www-authenticate"] == "Bearer"
        wrong = httpx.post(
            url + "/v2/models/affine/infer",
            json=x_body(),
            headers={"Authorization": "Bearer key-three"},
        )
        assert wrong.status_code == 401
        for key in ("key-one", "key-two"):
            ok = httpx.post(
                url + "/v2/models/affine/infer",
                json=x_body(),
                headers={"Authorization": f"Bearer {key}"},
            )
            assert ok.status_code == 200
        unload = url + "/v2/repository/models/affine/unload"
        as_user = httpx.post(unload, headers={"Authorization": "Bearer key-one"})
        assert as_user.status_code == 401
        as_admin = httpx.post(unload, headers={"Authorization": "Bearer admin-secret"})
        assert as_admin.status_code == 200
        gone = httpx.post(
            url + "/v2/models/affine/infer",
            json=x_body(),
            headers={"Authorization": "Bearer key-one"},
        )
        assert gone.status_code == 404
    finally:
        assert server.stop() == 0


def test_admin_routes_are_off_without_admin_keys(tmp_path: Path) -> None:
    server = keyed_server(tmp_path, admin=False)
    try:
        response = httpx.post(
            server.url + "/v2/repository/models/affine/unload",
            headers={"Authorization": "Bearer key-one"},
        )
        assert response.status_code == 403 and response.json()["code"] == 4030
    finally:
        assert server.stop() == 0


def test_a_new_version_that_fails_to_load_leaves_the_old_one_serving(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    affine_model(repo / "affine" / "1" / "model.onnx")
    (tmp_path / "admin.keys").write_text("admin-secret\n")
    server = start_server(repo, tmp_path / "log", "--admin-keys-file", str(tmp_path / "admin.keys"))
    admin = {"Authorization": "Bearer admin-secret"}
    load = server.url + "/v2/repository/models/affine/load"
    try:
        broken = repo / "affine" / "2" / "model.onnx"
        broken.parent.mkdir()
        broken.write_bytes(b"\x08\x07 a truncated protobuf")
        failed = httpx.post(load, headers=admin, timeout=30)
        assert failed.status_code == 503 and "still serving: [1]" in failed.json()["error"]
        served = httpx.post(server.url + "/v2/models/affine/infer", json=x_body()).json()
        assert served["model_version"] == "1"
        shutil.rmtree(broken.parent)
        affine_model(repo / "affine" / "3" / "model.onnx")
        loaded = httpx.post(load, headers=admin, timeout=30)
        assert loaded.status_code == 200 and loaded.json()["version"] == "3"
        served = httpx.post(server.url + "/v2/models/affine/infer", json=x_body()).json()
        assert served["model_version"] == "3"
        index = httpx.post(server.url + "/v2/repository/index").json()
        assert [(r["name"], r.get("version")) for r in index] == [("affine", "3")]
    finally:
        assert server.stop() == 0


def test_a_broken_newest_version_at_start_falls_back_to_the_previous(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    affine_model(repo / "affine" / "1" / "model.onnx")
    broken = repo / "affine" / "2" / "model.onnx"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"garbage")
    server = start_server(repo, tmp_path / "log")
    try:
        body = wait_loaded_models(server)
        assert body["ready"] is True  # the model serves, so the server is ready
        versions = body["models"]["affine"]["versions"]
        assert versions["1"]["state"] == "READY" and versions["2"]["state"] == "FAILED"
        served = httpx.post(server.url + "/v2/models/affine/infer", json=x_body()).json()
        assert served["model_version"] == "1"
    finally:
        assert server.stop() == 0


def test_memory_admission_limit_refuses_new_requests_with_503(tmp_path: Path) -> None:
    affine_model(tmp_path / "repo" / "affine" / "1" / "model.onnx")
    server = start_server(tmp_path / "repo", tmp_path / "log", "--max-memory-mb", "1")
    try:
        response = httpx.post(server.url + "/v2/models/affine/infer", json=x_body())
        assert response.status_code == 503 and response.json()["code"] == 5030
        assert "memory" in response.json()["error"] and "retry-after" in response.headers
        assert httpx.get(server.url + "/health").status_code == 200
    finally:
        assert server.stop() == 0


def test_global_in_flight_cap_sheds_with_429(tmp_path: Path) -> None:
    slow_model(tmp_path / "repo" / "slow" / "1" / "model.onnx", layers=1024)
    write_config(
        tmp_path / "repo" / "slow", {"max_batch_size": 1, "runtime": {"intra_op_threads": 1}}
    )
    server = start_server(tmp_path / "repo", tmp_path / "log", "--max-in-flight", "3")
    x = np.full((1, 512), 0.5, dtype=np.float32).tolist()
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 512], "data": x}]}
    try:
        limits = httpx.Limits(max_connections=16)
        with (
            httpx.Client(base_url=server.url, timeout=60, limits=limits) as client,
            ThreadPoolExecutor(16) as pool,
        ):
            responses = list(
                pool.map(lambda _: client.post("/v2/models/slow/infer", json=body), range(16))
            )
        statuses = [r.status_code for r in responses]
        assert set(statuses) == {200, 429}, statuses
        shed = [r for r in responses if r.status_code == 429]
        assert all(r.json()["code"] == 4290 and "in flight" in r.json()["error"] for r in shed)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("origin_allowed", [False, True])
def test_cors_is_off_unless_origins_are_given(tmp_path: Path, origin_allowed: bool) -> None:
    affine_model(tmp_path / "repo" / "affine" / "1" / "model.onnx")
    args = ["--cors-origins", "https://app.example.com"] if origin_allowed else []
    server = start_server(tmp_path / "repo", tmp_path / "log", *args)
    try:
        response = httpx.options(
            server.url + "/v2/models/affine/infer",
            headers={"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"},
        )
        allowed = response.headers.get("access-control-allow-origin")
        assert (allowed == "https://app.example.com") is origin_allowed
    finally:
        assert server.stop() == 0
