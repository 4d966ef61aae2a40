"""A hostile client's requests, one at a time, against the demo (with a small generator), while
a liveness probe asks `/health` every 20 ms: each attack's answer and time, and the probe's
slowest answer meanwhile (a Kubernetes liveness probe typically allows 1 s; the goal here is
under 100 ms).

    python benchmarks/hostile_bench.py     # writes the "hostile" section of RESULTS.md
    python benchmarks/hostile_bench.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
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


def under_probe(url: str, attack: Callable[[], str]) -> tuple[str, float, list[float]]:
    """Runs `attack` on a thread, probing /health every 20 ms on one connected client."""
    probes: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as probe, ThreadPoolExecutor(1) as pool:
        probe.get("/health")
        started = time.perf_counter()
        pending = pool.submit(attack)
        while not pending.done():
            t0 = time.perf_counter()
            probe.get("/health")
            probes.append(time.perf_counter() - t0)
            time.sleep(0.02)
        answer = pending.result()
        took = time.perf_counter() - started
    return answer, took, probes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="inferd-hostile-") as tmp:
        repo = build_demo(Path(tmp) / "demo")
        build_generator(repo, "docgen", steps=0, shape=SHAPE, corpus_chars=200_000)
        server = Server(repo)
        try:
            for name, attack in attacks(server.url):
                answer, took, probes = under_probe(server.url, attack)
                print(f"{name}: {answer} in {took * 1000:.0f} ms", flush=True)
                rows.append(
                    f"| {name} | {answer} | {took * 1000:.0f} | {len(probes)} | "
                    f"{statistics.median(probes) * 1000:.1f} | {max(probes) * 1000:.1f} |"
                    if probes
                    else f"| {name} | {answer} | {took * 1000:.0f} | 0 | - | - |"
                )
        finally:
            server.stop()
    command = ("python benchmarks/hostile_bench.py " + " ".join(sys.argv[1:])).strip()
    lines = [
        "## Hostile requests: the answer, and /health meanwhile",
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


if __name__ == "__main__":
    raise SystemExit(main())
