"""An exception no handler expected still gets inferd's answer (500, code 5000, the request
id), and the connection it came on stays usable: a pooling client's next requests on it
succeed.

The server here is inferd's own app (`create_app` with the engine `inferd serve` builds, every
middleware and handler) served by uvicorn on 127.0.0.1, with one route added that raises: a
defect cannot be called up on demand in a correct server, so the test adds one."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from inferd.composition import build_engine, open_jobs, read_access
from inferd.config.server_settings import ServerSettings
from inferd.server.app import create_app
from tests.integration.server import free_port
from tests.models import affine_model

X = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


class Faulty(RuntimeError):
    """What a defect raises: nothing inferd knows."""


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repo = tmp_path_factory.mktemp("faults-repo")
    affine_model(repo / "affine" / "1" / "model.onnx")
    settings = ServerSettings(repository=repo, grpc_port=0, port=free_port())
    engine, metrics = build_engine(settings)
    app = create_app(settings, engine, read_access(settings), open_jobs(settings, metrics), metrics)

    @app.get("/defect")
    async def defect() -> None:
        raise Faulty("a defect")

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=settings.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{settings.port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(base + "/ready", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not become ready"
        time.sleep(0.05)
    yield base
    server.should_exit = True
    thread.join(30)


def test_after_an_unexpected_error_the_same_connection_serves_the_next_requests(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    connections: list[object] = []

    def note_connection(response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        connections.append(stream.get_extra_info("socket") if stream is not None else None)

    with (
        caplog.at_level(logging.ERROR, logger="inferd.server.middleware"),
        httpx.Client(
            base_url=url, timeout=10, event_hooks={"response": [note_connection]}
        ) as client,
    ):
        for round_ in range(3):
            failed = client.get("/defect", headers={"X-Request-ID": f"defect-{round_}"})
            assert failed.status_code == 500
            body = failed.json()
            assert body["code"] == 5000 and body["request_id"] == f"defect-{round_}"
            assert f"defect-{round_}" in body["error"] and "Faulty" not in body["error"]
            assert failed.headers.get("connection", "").lower() != "close"
            for _ in range(5):
                assert client.get("/health").status_code == 200
                inferred = client.post("/v2/models/affine/infer", json=X)
                assert inferred.status_code == 200, inferred.text
    assert len({id(c) for c in connections}) == 1, "the client had to open a new connection"
    logged = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert [getattr(r, "request_id", None) for r in logged] == [f"defect-{i}" for i in range(3)]
