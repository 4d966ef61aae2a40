"""A hostile client's requests against a real server: each gets a coded 4xx (never a 500), no
unauthenticated answer names a server path or a config file's text, and `/health` stays
responsive while they are served."""

from __future__ import annotations

import contextlib
import gzip
import json
import signal
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from inferd.tools.demo import build_demo
from inferd.tools.generator import build_generator
from tests.generator_model import SHAPE
from tests.integration.server import RunningServer, start_server
from tests.models import affine_model, write_config

ADMIN_KEY = "hostile-test-admin"
HEALTH_BUDGET_S = 0.25
"""A liveness probe's answer while an attack is served (generous for a busy CI machine)."""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("hostile-repo")
    affine_model(root / "affine" / "1" / "model.onnx")
    write_config(root / "affine", {"max_batch_size": 8})
    (root / "badcfg").mkdir()
    (root / "badcfg" / "config.yaml").write_text("max_batch_size: [oops\nsecret: hunter2\n")
    (root / "badcfg" / "1").mkdir()
    (root / "badcfg" / "1" / "model.onnx").write_bytes(b"x")
    (root / "badfile" / "1").mkdir(parents=True)
    (root / "badfile" / "1" / "model.onnx").write_bytes(b"truncated")
    keys = tmp_path_factory.mktemp("hostile-keys") / "admin.keys"
    keys.write_text(ADMIN_KEY + "\n")
    log = tmp_path_factory.mktemp("hostile-logs") / "server.log"
    running = start_server(
        root,
        log,
        "--admin-keys-file",
        str(keys),
        "--header-timeout-s",
        "2",
        "--body-timeout-s",
        "2",
    )
    yield running
    assert running.stop() == 0, running.log()


def healthy(server: RunningServer) -> None:
    started = time.perf_counter()
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200
    assert time.perf_counter() - started < HEALTH_BUDGET_S


def coded(response: httpx.Response, status: int, code: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    return str(body["error"])


def test_ready_names_failures_by_repository_names_only(hostile: RunningServer) -> None:
    ready = httpx.get(hostile.url + "/ready", timeout=5)
    assert ready.status_code == 503
    text = ready.text
    root = str(Path(hostile.log_path).parent)  # never a server path
    assert "/tmp" not in text and root not in text
    assert "oops" not in text and "hunter2" not in text  # never the config's text
    models = ready.json()["models"]
    assert models["badcfg"]["reason"].startswith("badcfg/config.yaml: not valid YAML at line 2")
    assert "cannot load model.onnx" in models["badfile"]["versions"]["1"]["reason"]
    healthy(hostile)


X4 = [1, 2, 3, 4]
X = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": X4}]}


@pytest.mark.parametrize(
    ("path", "headers", "body", "status", "code"),
    [
        # str.isdigit accepts "²", int() does not: these were 500s
        ("/v2/models/affine/infer", {"X-Request-Timeout-Ms": b"1\xb2"}, X, 400, 4004),
        ("/v2/models/affine/infer", {"Inference-Header-Content-Length": b"\xb2"}, X, 400, 4004),
        ("/v2/models/affine/versions/\u00b2/infer", {}, X, 404, 4040),
        # numpy holds at most 64 axes and iterates over 32: more was a 500
        (
            "/v2/models/affine/infer",
            {},
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1] * 99 + [4], "data": X4}]},
            400,
            4004,
        ),
        (
            "/v2/models/affine/infer",
            {},
            {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1] * 33, "data": ["a"]}]},
            400,
            4004,
        ),
        # a zero dimension hid an absurd shape from the size check
        (
            "/v2/models/affine/infer",
            {},
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [0, 2**62, 4], "data": []}]},
            400,
            4004,
        ),
    ],
)
def test_malformed_numbers_get_a_code_not_a_500(
    hostile: RunningServer,
    path: str,
    headers: dict[str, bytes],
    body: object,
    status: int,
    code: int,
) -> None:
    response = httpx.post(hostile.url + path, json=body, headers=headers, timeout=10)
    coded(response, status, code)
    healthy(hostile)
    assert httpx.post(hostile.url + "/v2/models/affine/infer", json=X).status_code == 200


def test_a_client_gone_mid_body_is_no_server_error(hostile: RunningServer) -> None:
    host, port = hostile.url.removeprefix("http://").split(":")
    before = httpx.get(hostile.url + "/metrics").text
    for path in ("/v2/models/affine/infer", "/predict"):
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            head = (
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: 1000\r\n\r\n"
            )
            sock.sendall(head.encode() + b'{"inputs": [')
        healthy(hostile)
    time.sleep(0.5)  # the server notices the closed connections
    after = httpx.get(hostile.url + "/metrics").text
    server_errors = [
        line
        for line in after.splitlines()
        if line.startswith("inferd_requests_total") and 'status="500"' in line
    ]
    assert server_errors == [line for line in before.splitlines() if line in server_errors]
    assert "unhandled error" not in hostile.log()


def test_simultaneous_loads_of_one_model_all_succeed(hostile: RunningServer) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    url = hostile.url + "/v2/repository/models/affine/load"
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: httpx.post(url, headers=admin, timeout=60), range(6)))
        healthy(hostile)
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert {a.json()["state"] for a in answers} == {"READY"}
    assert httpx.post(hostile.url + "/v2/models/affine/infer", json=X).status_code == 200


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = build_demo(tmp_path_factory.mktemp("hostile-demo") / "repo")
    build_generator(root, "docgen", steps=0, shape=SHAPE, corpus_chars=200_000)
    running = start_server(root, tmp_path_factory.mktemp("hostile-demo-logs") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def health_while(server: RunningServer, path: str, body: object) -> httpx.Response:
    """POSTs `body` on a thread while probing /health; every probe must answer within the
    budget. The body is serialized first: encoding megabytes of JSON holds this process's GIL,
    which would slow the probes here, not the server."""
    return health_while_sent(server, path, json.dumps(body).encode())[0]


def health_while_sent(
    server: RunningServer,
    path: str,
    content: bytes,
    copies: int = 1,
    gzipped: bool = False,
    budget_s: float = HEALTH_BUDGET_S,
) -> list[httpx.Response]:
    """`copies` POSTs of `content` at once (gzip-compressed as sent, with `gzipped`), while
    /health is probed; every probe must answer within `budget_s`. A burst of another process
    on these two cores can hold one probe once; a blocked event loop holds one every time the
    body arrives. So a slow measurement is taken again, and only two slow ones fail."""
    answers, slowest = sent_while_probing(server, path, content, copies, gzipped)
    if slowest >= budget_s:
        answers, again = sent_while_probing(server, path, content, copies, gzipped)
        slowest = min(slowest, again)
    assert slowest < budget_s, f"/health took {slowest * 1000:.0f} ms (twice)"
    return answers


def sent_while_probing(
    server: RunningServer, path: str, content: bytes, copies: int, gzipped: bool
) -> tuple[list[httpx.Response], float]:
    """The answers to `copies` POSTs sent at once, and the slowest /health probe meanwhile."""
    headers = {"content-type": "application/json"}
    if gzipped:
        headers["content-encoding"] = "gzip"
    # one client for the probes, connected before: a client made per probe spends tens of
    # milliseconds of this process's CPU (its TLS context) on each, which is not the server's
    with (
        httpx.Client(base_url=server.url, timeout=5) as probe,
        ThreadPoolExecutor(copies) as pool,
    ):
        assert probe.get("/health").status_code == 200
        pending = [
            pool.submit(httpx.post, server.url + path, content=content, headers=headers, timeout=60)
            for _ in range(copies)
        ]
        slowest = 0.0
        while not all(p.done() for p in pending):
            started = time.perf_counter()
            assert probe.get("/health").status_code == 200
            slowest = max(slowest, time.perf_counter() - started)
            time.sleep(0.02)
        return [p.result() for p in pending], slowest


def test_huge_requests_are_refused_before_any_work(demo: RunningServer) -> None:
    # bodies no text request can need (over max_text_body_bytes, 8 MiB): refused from the
    # head, never read or parsed
    texts = ["word " * 20_000] * 128  # 128 texts of 100k characters: 12.8M together
    answer = health_while(demo, "/predict", {"texts": texts})
    assert "over the limit of 8388608 bytes" in coded(answer, 413, 4002)
    answer = health_while(demo, "/generate", {"prompt": "x" * 20_000_000})  # a 20 MB prompt
    assert "over the limit of 8388608 bytes" in coded(answer, 413, 4002)
    # under it, the character limits refuse before any tokenization
    texts = ["word " * 2_000] * 128  # 1.28M characters together
    answer = health_while(demo, "/predict", {"texts": texts})
    assert "characters together; the limit is 1000000" in coded(answer, 400, 4002)
    answer = health_while(demo, "/generate", {"prompt": "x" * 2_000_000})
    assert "characters; the limit is 100000" in coded(answer, 400, 4002)


def test_large_legal_texts_are_tokenized_off_the_event_loop(demo: RunningServer) -> None:
    texts = [f"sentence {i} " * 8_000 for i in range(8)]  # 8 texts of ~100k: under the caps
    answer = health_while(demo, "/embed", {"texts": texts, "model": "minilm"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["tokens"] == 8 * 256  # truncated to max_tokens each
    prompt = "return the value " * 5_000  # 85k characters: tokenized on a thread, then 4002
    answer = health_while(demo, "/generate", {"prompt": prompt})
    assert "tokens" in coded(answer, 400, 4002)


def test_a_compressed_text_body_is_bounded_as_inflated_by_the_text_limit(
    demo: RunningServer,
) -> None:
    # 9 MB of JSON in about 9 KB: over max_text_body_bytes (8 MiB) once inflated
    body = gzip.compress(b'{"texts": ["' + b"a" * 9_000_000 + b'"]}')
    assert len(body) < 100_000
    (answer,) = health_while_sent(demo, "/embed", body, gzipped=True)
    assert "over the limit of 8388608 bytes when inflated" in coded(answer, 413, 4002)


def test_large_json_bodies_take_turns_and_the_probes_are_answered_between_them(
    hostile: RunningServer,
) -> None:
    # 8 bodies of 5 million numbers each (10 MB of JSON, 20 KB sent), completed at once: each
    # holds the event loop while it is parsed; one after the other, a probe waited for all of
    # them (seconds); in turns, it waits for one at most
    inflated = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": ['
    inflated += b"0," * 4_999_999 + b"0]}]}"
    started = time.perf_counter()
    json.loads(inflated)  # about what one parse costs the server (its parser is faster)
    budget_s = max(HEALTH_BUDGET_S, 2 * (time.perf_counter() - started))
    body = gzip.compress(inflated)
    head = (
        b"POST /v2/models/affine/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    host, port = hostile.url.removeprefix("http://").split(":")
    with contextlib.ExitStack() as stack, httpx.Client(base_url=hostile.url, timeout=10) as probe:
        socks = [
            stack.enter_context(socket.create_connection((host, int(port)), timeout=30))
            for _ in range(8)
        ]
        for sock in socks:
            sock.sendall(head + body[:-1])
        assert probe.get("/health").status_code == 200
        for sock in socks:  # every body completes within a millisecond or so
            sock.sendall(body[-1:])
        slowest = 0.0
        for _ in range(20):
            began = time.perf_counter()
            assert probe.get("/health").status_code == 200
            slowest = max(slowest, time.perf_counter() - began)
            time.sleep(0.05)
        answers = []
        for sock in socks:
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            answers.append(received)
    assert slowest < budget_s, f"/health took {slowest * 1000:.0f} ms"
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
        assert b"needs 4 elements, data has 5000000" in answer and b'"code":4004' in answer


def raw_exchange(server: RunningServer, head: bytes, wait_s: float = 10.0) -> bytes:
    """Sends `head` on a new connection and reads until the server closes it."""
    host, port = server.url.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head)  # refused while still sending: the answer is read below
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                received += chunk
    return received


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8_000_000 + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-H%d: v\r\n" % i for i in range(300))
        + b"\r\n",
    ],
    ids=["8 MB header", "300 headers"],
)
def test_oversized_heads_are_refused_at_once(hostile: RunningServer, head: bytes) -> None:
    started = time.perf_counter()
    answer = raw_exchange(hostile, head)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"code":4002' in answer
    assert time.perf_counter() - started < 2.0
    healthy(hostile)


def test_a_head_trickled_past_the_timeout_is_dropped(hostile: RunningServer) -> None:
    started = time.perf_counter()
    answer = raw_exchange(hostile, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert 1.5 < time.perf_counter() - started < 6.0  # --header-timeout-s 2
    healthy(hostile)


STALLED_BODY = (
    b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b'Content-Length: 25\r\n\r\n{"tex'
)


def test_a_body_that_stops_arriving_is_dropped(hostile: RunningServer) -> None:
    started = time.perf_counter()
    answer = raw_exchange(hostile, STALLED_BODY)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"body stopped arriving" in answer and b'"code":4002' in answer
    assert 1.5 < time.perf_counter() - started < 6.0  # --body-timeout-s 2
    healthy(hostile)
    assert "unhandled error" not in hostile.log()


def test_a_body_still_arriving_at_the_drain_is_answered_5030(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    affine_model(root / "affine" / "1" / "model.onnx")
    running = start_server(root, tmp_path / "server.log")
    host, port = running.url.removeprefix("http://").split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(STALLED_BODY)
            time.sleep(0.3)
            running.process.send_signal(signal.SIGTERM)
            received = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := sock.recv(65536):
                    received += chunk
        assert running.process.wait(timeout=30) == 0, running.log()
    finally:
        if running.process.poll() is None:
            running.stop()
    assert received.startswith(b"HTTP/1.1 503 "), received[:200]
    assert b'"code":5030' in received and b"shutting down" in received
    assert "Exception in ASGI application" not in running.log()


def test_ordinary_heads_and_keep_alive_still_work(hostile: RunningServer) -> None:
    with httpx.Client(base_url=hostile.url, timeout=10) as client:
        for _ in range(3):
            answer = client.post(
                "/v2/models/affine/infer", json=X, headers={"X-Context": "c" * 30_000}
            )
            assert answer.status_code == 200
        time.sleep(2.5)  # idle past the head timeout: keep-alive is uvicorn's to end
        assert client.get("/health").status_code == 200


def test_a_whole_large_request_in_one_read_is_not_mistaken_for_a_large_head(
    hostile: RunningServer,
) -> None:
    payload = json.dumps(X).encode() + b" " * 150_000  # a 150 KB body, mostly whitespace
    request = (
        b"POST /v2/models/affine/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload)
    ) + payload
    for _ in range(3):  # sent in one write: the server reads head and body together
        answer = raw_exchange(hostile, request)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
