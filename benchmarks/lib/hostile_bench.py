"""A hostile client's requests, one at a time, against the demo (with a small generator), while
a liveness probe asks `/health` every 20 ms: each attack's answer and time, and the probe's
slowest answer meanwhile (a Kubernetes liveness probe typically allows 1 s; the goal here is
under 100 ms).

    python benchmarks/overload_bench.py hostile  # writes the "hostile" section of RESULTS.md
    python benchmarks/overload_bench.py hostile --quick
    python benchmarks/overload_bench.py hostile --grpc  # "hostile-grpc": 64 MiB messages
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from inferd.grpc_v2 import kserve_v2_pb2 as pb
from inferd.grpc_v2.message_scan import varint_bytes
from inferd.tools.demo import build_demo
from inferd.tools.generator import build_generator
from tests.generator_model import SHAPE


def raw(url: str, payload: bytes) -> str:
    """Sends `payload` on a new connection; the answer's status."""
    host, port = url.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
        with contextlib.suppress(ConnectionResetError):
            while b"\r\n" not in received and (chunk := sock.recv(65536)):
                received += chunk
    status_line = received.split(b"\r\n", 1)[0].decode("latin-1")
    return status_line.split(" ")[1] if status_line else "closed, no answer"


def post(url: str, path: str, body: object) -> Callable[[], str]:
    content = orjson.dumps(body)  # serialized before the clock starts

    def send() -> str:
        answer = httpx.post(
            url + path, content=content, headers={"content-type": "application/json"}, timeout=120
        )
        code = answer.json().get("code") if answer.status_code >= 400 else None
        return f"{answer.status_code}" + (f" ({code})" if code else "")

    return send


def attacks(url: str) -> list[tuple[str, Callable[[], str]]]:
    big_header = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 128_000_000 + b"\r\n\r\n"
    many_headers = (
        b"GET /health HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-H%d: v\r\n" % i for i in range(300))
        + b"\r\n"
    )
    return [
        (
            "/predict, 128 texts of 100k characters",
            post(url, "/predict", {"texts": ["word " * 20_000] * 128}),
        ),
        ("/generate, a 20 MB prompt", post(url, "/generate", {"prompt": "x" * 20_000_000})),
        (
            "/embed, 8 legal texts of 100k characters",
            post(
                url, "/embed", {"texts": [f"s{i} " * 25_000 for i in range(8)], "model": "minilm"}
            ),
        ),
        (
            "/generate, an 85k-character prompt",
            post(url, "/generate", {"prompt": "return the value " * 5_000}),
        ),
        ("a 128 MB header", lambda: raw(url, big_header)),
        ("300 headers", lambda: raw(url, many_headers)),
        (
            "V2 shape [0, 2**62, 4]",
            post(
                url,
                "/v2/models/sentiment-head/infer",
                {
                    "inputs": [
                        {
                            "name": "embedding",
                            "datatype": "FP32",
                            "shape": [0, 2**62, 4],
                            "data": [],
                        }
                    ]
                },
            ),
        ),
    ]


GRPC_KEY = "hostile-bench-key"
MESSAGE = 64 * 1024 * 1024 - 1024
"""Bytes of each gRPC attack: just under the default message limit (max_body_bytes)."""
SERVICE = "/inference.GRPCInferenceService/"
LARGE = 60 * 1024 * 1024
"""Bytes of each of the messages sent four at once."""


def grpc_call(target: str, method: str, data: bytes, key: bool) -> Callable[[], str]:
    """One raw call of `method` carrying `data` (bytes, as a hostile client writes them)."""
    metadata = (("authorization", f"Bearer {GRPC_KEY}"),) if key else ()

    def send() -> str:
        with grpc.insecure_channel(
            target, options=[("grpc.max_send_message_length", MESSAGE + 1024)]
        ) as channel:
            call = channel.unary_unary(SERVICE + method)
            try:
                call(data, metadata=metadata, timeout=120)
            except grpc.RpcError as exc:
                details = exc.details() or ""  # type: ignore[attr-defined]
                code = details[1:5] if details.startswith("[") else ""
                name = exc.code().name  # type: ignore[attr-defined]
                return name + (f" ({code})" if code else "")
            return "OK"

    return send


def at_once(calls: list[Callable[[], str]]) -> Callable[[], str]:
    """The calls sent together, each from a thread of its own; their answers, counted."""

    def send() -> str:
        answers: list[str] = []
        threads = [threading.Thread(target=lambda c=call: answers.append(c())) for call in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return ", ".join(f"{answers.count(a)}x {a}" for a in sorted(set(answers)))

    return send


def grpc_attacks(target: str) -> list[tuple[str, Callable[[], str]]]:
    tiny_unknown = b"\xa0\x06\x01" * (MESSAGE // 3)  # field 100, varint 1, again and again
    empty_inputs = b"\x2a\x00" * (MESSAGE // 2)  # `inputs`, each an empty tensor
    packed = b"\x01" * (MESSAGE - 64)  # one-byte integers in one packed list
    contents = pb.InferTensorContents.DESCRIPTOR.fields_by_name["int64_contents"].number
    packed_ints = _message(5, _message(5, _message(contents, packed)))  # inputs.contents.int64
    floats = pb.ModelInferRequest(model_name="sentiment-head")
    typed = floats.inputs.add(name="embedding", datatype="FP32", shape=[43690, 384])
    typed.contents.fp32_contents.extend(np.full(43690 * 384, 0.05, np.float32).tolist())
    legal_floats = floats.SerializeToString()
    rows = LARGE // (384 * 4)
    raw_floats = pb.ModelInferRequest(model_name="sentiment-head")
    raw_floats.inputs.add(name="embedding", datatype="FP32", shape=[rows, 384])
    raw_floats.raw_input_contents.append(bytes(rows * 384 * 4))
    large = raw_floats.SerializeToString()
    truncated = _message(1, b"m")[:-1] + tiny_unknown[: MESSAGE - 16]
    attacks: list[tuple[str, Callable[[], str]]] = []
    for key in (False, True):
        who = "with a key" if key else "no key"
        attacks += [
            (
                f"ModelInfer, 64 MiB of tiny unknown fields, {who}",
                grpc_call(target, "ModelInfer", tiny_unknown, key),
            ),
            (
                f"ModelInfer, 64 MiB of empty inputs, {who}",
                grpc_call(target, "ModelInfer", empty_inputs, key),
            ),
        ]
    attacks += [
        (
            "ModelInfer, 64 MiB of one-byte packed integers, with a key",
            grpc_call(target, "ModelInfer", packed_ints, True),
        ),
        (
            "ModelInfer, 64 MiB cut short, with a key",
            grpc_call(target, "ModelInfer", truncated, True),
        ),
        (
            "ModelMetadata, 64 MiB of tiny unknown fields, with a key",
            grpc_call(target, "ModelMetadata", tiny_unknown, True),
        ),
        (
            f"ModelInfer, {len(legal_floats) >> 20} MiB of typed FP32 (43,690 rows), with a key",
            grpc_call(target, "ModelInfer", legal_floats, True),
        ),
        (
            f"ModelInfer, four {LARGE >> 20} MiB messages of raw FP32 ({rows:,} rows) at once, "
            "with a key",
            at_once([grpc_call(target, "ModelInfer", large, True) for _ in range(4)]),
        ),
    ]
    return attacks


def attack_rows(url: str, named: Iterable[tuple[str, Callable[[], str]]]) -> list[str]:
    """Each attack sent alone while /health is probed: a table row each (answer, its time,
    the probes' count, median and slowest)."""
    rows = []
    for name, attack in named:
        answer, took, probes = under_probe(url, attack)
        print(f"{name}: {answer} in {took * 1000:.0f} ms", flush=True)
        rows.append(
            f"| {name} | {answer} | {took * 1000:.0f} | {len(probes)} | "
            f"{statistics.median(probes) * 1000:.1f} | {max(probes) * 1000:.1f} |"
            if probes
            else f"| {name} | {answer} | {took * 1000:.0f} | 0 | - | - |"
        )
    return rows


def _message(number: int, payload: bytes) -> bytes:
    return varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload


def under_probe(url: str, attack: Callable[[], str]) -> tuple[str, float, list[float]]:
    """Runs `attack` here while another process probes /health every 20 ms on one connected
    client (its own process, so that the attacking client's work in this interpreter never
    delays a probe's measurement)."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    results: multiprocessing.Queue[list[float]] = context.Queue()
    prober = context.Process(target=probe_health, args=(url, ready, stop, results))
    prober.start()
    try:
        ready.wait(30)
        started = time.perf_counter()
        answer = attack()
        took = time.perf_counter() - started
        stop.set()
        probes = results.get(timeout=60)
    finally:
        prober.join(10)
    return answer, took, probes


def probe_health(url: str, ready: Any, stop: Any, results: Any) -> None:
    """(In the probing process.) /health every 20 ms until `stop`; the probes' times."""
    probes: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as probe:
        probe.get("/health")
        ready.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            probe.get("/health")
            probes.append(time.perf_counter() - t0)
            time.sleep(0.02)
    results.put(probes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--grpc", action="store_true", help="64 MiB gRPC messages, with and without a key"
    )
    args = parser.parse_args()
    if args.grpc:
        return main_grpc(args.quick)
    rows = []
    with tempfile.TemporaryDirectory(prefix="inferd-hostile-") as tmp:
        repo = build_demo(Path(tmp) / "demo")
        build_generator(repo, "docgen", steps=0, shape=SHAPE, corpus_chars=200_000)
        server = Server(repo)
        try:
            rows += attack_rows(server.url, attacks(server.url))
        finally:
            server.stop()
    command = ("python benchmarks/overload_bench.py hostile " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Hostile requests: the answer, and /health meanwhile",
        "",
        f"Machine: {machine_description()}.",
        "Server: `inferd serve` on the demo repository plus a 2-layer GPT-2 generator "
        "(`docgen`), default configuration. Each attack is sent alone (its body serialized "
        "before the clock starts) while one connected client asks `/health` every 20 ms; "
        "an attack that ends before the first probe shows none.",
        "",
        f"Command: `{command}`",
        "",
        "| attack | answer | ms | probes | /health p50 ms | /health max ms |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *rows,
    ]
    publish("hostile", "\n".join(lines), args.quick)
    return 0


def main_grpc(quick: bool) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="inferd-hostile-") as tmp:
        repo = build_demo(Path(tmp) / "demo")
        keys = Path(tmp) / "api.keys"
        keys.write_text(GRPC_KEY + "\n")
        server = Server(repo, "--api-keys-file", str(keys))
        try:
            assert server.grpc_target is not None
            rows += attack_rows(server.url, grpc_attacks(server.grpc_target))
        finally:
            server.stop()
    command = ("python benchmarks/overload_bench.py hostile " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Hostile gRPC messages: the answer, and /health meanwhile",
        "",
        f"Machine: {machine_description()}.",
        "Server: `inferd serve` on the demo repository with an API key, default "
        "configuration. Each message (just under the 64 MiB limit, built before the clock "
        "starts) is sent alone on a new channel by a raw gRPC client while one connected "
        "client asks `/health` every 20 ms (the last row: four messages at once, each on "
        "its own channel). The time includes sending the messages.",
        "",
        f"Command: `{command}`",
        "",
        "| message | answer | ms | probes | /health p50 ms | /health max ms |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "Four messages at once, before gRPC had a thread and event loop of its own (it ran on "
        "the HTTP server's loop, which waited for the four messages' copies in a row): "
        "`/health` max 162 and 249 ms in two `--quick` runs of this command; after, 6-23 ms "
        "in three runs.",
    ]
    publish("hostile-grpc", "\n".join(lines), quick)
    return 0
