"""What the wire costs: requests/s and the server's CPU per request for the same tensor over
HTTP JSON, HTTP with the binary tensor extension, and gRPC (raw contents), on one server.

Two payloads: a small tensor (FP32 [1, 4] through y = 2x + 1) and a 1 MB one (FP32
[1, 262144] through y = x + x, 1 MB back). Each client is a closed loop of `--concurrency`
requests in flight on one connection per request slot (httpx for HTTP; grpc.aio with the
published KServe V2 stubs for gRPC), sharing the machine with the server. The server's CPU is
read from /proc around each run; rounds alternate between the wires and the medians are
reported.

    python benchmarks/wire_bench.py         # writes the "wire" section of RESULTS.md
    python benchmarks/wire_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
import numpy as np
import onnx
import orjson
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import service_pb2, service_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from common import Server, machine_description, publish

BIG = 262_144
"""FP32 elements of the 1 MB tensor."""


def build(root: Path) -> Path:
    def save(name: str, width: int, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])
        model = helper.make_model(
            helper.make_graph(nodes, name, [x], [y], inits),
            opset_imports=[helper.make_opsetid("", 17)],
        )
        path = root / name / "1" / "model.onnx"
        path.parent.mkdir(parents=True)
        onnx.save(model, str(path))
        (root / name / "config.yaml").write_text("max_batch_size: 8\n")

    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    save(
        "small",
        4,
        [
            helper.make_node("Mul", ["x", "two"], ["x2"]),
            helper.make_node("Add", ["x2", "one"], ["y"]),
        ],
        [two, one],
    )
    save("big", BIG, [helper.make_node("Add", ["x", "x"], ["y"])], [])
    return root


Call = Callable[[], Awaitable[None]]


def http_json(client: httpx.AsyncClient, model: str, x: np.ndarray) -> Call:
    body = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "data": x.ravel().tolist(),
                }
            ]
        }
    )
    headers = {"Content-Type": "application/json"}

    async def call() -> None:
        answer = await client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
        answer.raise_for_status()
        orjson.loads(answer.content)

    return call


def http_binary(client: httpx.AsyncClient, model: str, x: np.ndarray) -> Call:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    body = header + x.tobytes()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }

    async def call() -> None:
        answer = await client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
        answer.raise_for_status()

    return call


def grpc_raw(stub: service_pb2_grpc.GRPCInferenceServiceStub, model: str, x: np.ndarray) -> Call:
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    request.raw_input_contents.append(x.tobytes())

    async def call() -> None:
        await stub.ModelInfer(request)

    return call


async def closed_loop(call: Call, concurrency: int, seconds: float) -> tuple[int, list[float]]:
    latencies: list[float] = []
    end = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < end:
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(latencies), latencies


async def measure(
    server: Server, concurrency: int, seconds: float, rounds: int
) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    """Per (payload, wire): (requests/s, server CPU ms per request, client p50 ms) per round."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    grpc_target = server.grpc_target
    options = [
        ("grpc.max_receive_message_length", 64 << 20),
        ("grpc.max_send_message_length", 64 << 20),
    ]
    async with (
        httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client,
        grpc.aio.insecure_channel(grpc_target, options=options) as channel,
    ):
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        payloads = {
            "small FP32 [1, 4]": ("small", np.arange(4, dtype=np.float32).reshape(1, 4)),
            "1 MB FP32 [1, 262144]": ("big", np.ones((1, BIG), dtype=np.float32)),
        }
        for payload, (model, x) in payloads.items():
            calls = {
                "HTTP JSON": http_json(client, model, x),
                "HTTP binary": http_binary(client, model, x),
                "gRPC": grpc_raw(stub, model, x),
            }
            for call in calls.values():  # warm every connection and path
                await closed_loop(call, concurrency, 1.0)
            for _ in range(rounds):
                for wire, call in calls.items():
                    cpu0 = server.cpu_s()
                    started = time.perf_counter()
                    count, latencies = await closed_loop(call, concurrency, seconds)
                    elapsed = time.perf_counter() - started
                    cpu_ms = (server.cpu_s() - cpu0) * 1000 / count
                    p50 = float(np.percentile(latencies, 50)) * 1000
                    results.setdefault((payload, wire), []).append((count / elapsed, cpu_ms, p50))
                    print(
                        f"{payload} {wire}: {count / elapsed:.0f} req/s, {cpu_ms:.3f} ms CPU",
                        flush=True,
                    )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 2, 1
    with tempfile.TemporaryDirectory(prefix="inferd-wire-") as name:
        repo = build(Path(name))
        server = Server(repo, "--max-body-bytes", str(64 << 20))
        try:
            results = asyncio.run(measure(server, args.concurrency, args.seconds, args.rounds))
        finally:
            server.stop()
    rows = []
    for (payload, wire), runs in results.items():
        rps = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        p50 = statistics.median(r[2] for r in runs)
        rows.append(f"| {payload} | {wire} | {rps:,.0f} | {cpu:.3f} | {p50:.2f} |")
    command = ("python benchmarks/wire_bench.py " + " ".join(sys.argv[1:])).strip()
    lines = [
        "## The wire: HTTP JSON, HTTP binary and gRPC on one server",
        "",
        f"Machine: {machine_description()}.",
        f"Closed loop, {args.concurrency} requests in flight, {args.rounds} rounds of "
        f"{args.seconds:g} s per wire (medians); the client shares the cores. Server CPU per "
        "request from /proc (every thread of the server process).",
        "",
        f"Command: `{command}`",
        "",
        "| payload | wire | requests/s | server CPU ms / request | client p50 ms |",
        "| --- | --- | --- | --- | --- |",
        *rows,
    ]
    publish("wire", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
