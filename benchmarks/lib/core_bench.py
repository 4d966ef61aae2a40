"""Core benchmark: inferd over HTTP (KServe V2 JSON) against raw in-process ONNX Runtime.

One run on this machine: a 6-layer BERT-style encoder (hidden 384, 12 heads, random weights) at
sequence length 128; raw ONNX Runtime at batch sizes 1..16 (its best is the limit), then inferd
at concurrency 1, 8, 32, 64 with one item per request, driven by wrk (one thread, a Lua script).
Reports throughput, p50 and p99, the ratio to raw, and CPU time per item of the server process
against raw ONNX Runtime's (efficiency). Medians over --repeats runs.

    python benchmarks/serving_bench.py core  # writes the "core" section of RESULTS.md
    python benchmarks/serving_bench.py core --quick  # a short smoke run, nothing written
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    LoadResult,
    RawResult,
    Server,
    machine_description,
    measure_raw,
    median_of,
    publish,
    require_wrk,
    run_wrk,
)
from inferd.tools.encoder_graph import EncoderShape, build_encoder, random_weights

SEQ = 128


def build_repo(
    root: Path, shape: EncoderShape, max_batch_size: int, threads: int, instances: int
) -> Path:
    model = build_encoder(random_weights(shape), shape, last_hidden_state=False)
    path = root / "encoder" / "1" / "model.onnx"
    path.parent.mkdir(parents=True)
    onnx.save(model, str(path))  # type: ignore[arg-type]
    config = {
        "max_batch_size": max_batch_size,
        "instance_count": instances,
        "runtime": {"intra_op_threads": threads, "inter_op_threads": 1},
        "inputs": [
            {"name": "input_ids", "pad_value": 0},
            {"name": "attention_mask", "pad_value": 0},
        ],
        "dynamic_batching": {"max_queue_delay_ms": 2, "max_queue_size": 512},
    }
    (root / "encoder" / "config.yaml").write_text(yaml.safe_dump(config))
    return path


def feeds(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    ids = rng.integers(1000, 30000, size=(batch, SEQ), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def raw_sweep(path: Path, threads: int, batches: list[int], duration_s: float) -> list[RawResult]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    prepared = {b: feeds(b, rng) for b in batches}
    return [
        measure_raw(lambda b: session.run(["mean_pooled"], prepared[b]), b, duration_s)
        for b in batches
    ]


def request_body() -> bytes:
    ids = np.random.default_rng(1).integers(1000, 30000, size=(1, SEQ)).tolist()
    return orjson.dumps(
        {
            "inputs": [
                {"name": "input_ids", "datatype": "INT64", "shape": [1, SEQ], "data": ids},
                {
                    "name": "attention_mask",
                    "datatype": "INT64",
                    "shape": [1, SEQ],
                    "data": [[1] * SEQ],
                },
            ],
        }
    )


def median_raw(runs: list[list[RawResult]]) -> list[RawResult]:
    out = []
    for i in range(len(runs[0])):
        rs = [run[i] for run in runs]
        out.append(
            RawResult(
                rs[0].batch,
                median_of([r.items_per_s for r in rs]),
                median_of([r.p50_ms for r in rs]),
                median_of([r.p99_ms for r in rs]),
                median_of([r.cpu_ms_per_item for r in rs]),
            )
        )
    return out


def median_load(runs: list[list[LoadResult]]) -> list[LoadResult]:
    out = []
    for i in range(len(runs[0])):
        rs = [run[i] for run in runs]
        out.append(
            LoadResult(
                rs[0].concurrency,
                sum(r.requests for r in rs),
                median_of([r.requests_per_s for r in rs]),
                median_of([r.p50_ms for r in rs]),
                median_of([r.p99_ms for r in rs]),
                sum(r.errors for r in rs),
                median_of([r.server_cpu_ms_per_request for r in rs]),
            )
        )
    return out


def report(
    raw: list[RawResult], load: list[LoadResult], command: str, repeats: int, threads: int
) -> str:
    best = max(raw, key=lambda r: r.items_per_s)
    batch1 = next(r for r in raw if r.batch == 1)
    lines = [
        "## Core: inferd (V2 JSON over HTTP) vs raw ONNX Runtime",
        "",
        f"Machine: {machine_description()}.",
        f"Model: 6-layer BERT-style encoder (hidden 384, 12 heads, FFN 1536, random weights), "
        f"sequence length {SEQ}, output mean-pooled [batch, 384]; ONNX Runtime CPU provider, "
        f"{threads} intra-op threads in both. Load generator: wrk, 1 thread, closed loop, one "
        f"item per request. Medians of {repeats} runs.",
        "",
        f"Command: `{command}`",
        "",
        "Raw in-process ONNX Runtime (latency is per batch):",
        "",
        "| batch | items/s | p50 ms | p99 ms | CPU ms/item |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in raw:
        mark = " (best)" if r is best else ""
        lines.append(
            f"| {r.batch}{mark} | {r.items_per_s:.1f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | "
            f"{r.cpu_ms_per_item:.1f} |"
        )
    lines += [
        "",
        "inferd over HTTP (latency is per request, as the client sees it):",
        "",
        "| concurrency | req/s | vs raw best | p50 ms | p99 ms | server CPU ms/item | "
        "efficiency | errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in load:
        lines.append(
            f"| {r.concurrency} | {r.requests_per_s:.1f} | "
            f"{r.requests_per_s / best.items_per_s:.0%} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | "
            f"{r.server_cpu_ms_per_request:.1f} | "
            f"{best.cpu_ms_per_item / r.server_cpu_ms_per_request:.0%} | {r.errors} |"
        )
    c1 = next((r for r in load if r.concurrency == 1), None)
    lines += [""]
    if c1 is not None:
        lines.append(
            f"Concurrency 1: p50 {c1.p50_ms:.1f} ms against raw batch-1 p50 {batch1.p50_ms:.1f} ms "
            f"(+{c1.p50_ms - batch1.p50_ms:.1f} ms for HTTP, JSON and queueing)."
        )
    saturated = max(load, key=lambda r: r.requests_per_s)
    lines.append(
        f"At saturation: {saturated.requests_per_s:.1f} req/s = "
        f"{saturated.requests_per_s / best.items_per_s:.0%} of raw best "
        f"({best.items_per_s:.1f} items/s at batch {best.batch}); efficiency "
        f"(raw best CPU per item / server CPU per item) "
        f"{best.cpu_ms_per_item / saturated.server_cpu_ms_per_request:.0%}."
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--raw-seconds", type=float, default=5)
    parser.add_argument("--load-seconds", type=float, default=10)
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--batches", default="1,2,4,8,16")
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="intra-op threads of raw ONNX Runtime",
    )
    parser.add_argument(
        "--server-threads",
        type=int,
        default=None,
        help="intra-op threads of each inferd instance (default: --threads)",
    )
    parser.add_argument("--instances", type=int, default=1, help="inferd instance_count")
    parser.add_argument("--quick", action="store_true", help="short steps, one run, no write")
    args = parser.parse_args()
    require_wrk()
    if args.quick:
        args.repeats, args.raw_seconds, args.load_seconds = 1, 1.5, 3
    batches = [int(b) for b in args.batches.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    shape = EncoderShape(layers=6, hidden=384, heads=12, intermediate=1536)
    body = request_body()

    with tempfile.TemporaryDirectory() as tmp:
        raw_runs, load_runs = [], []
        server_threads = args.server_threads or args.threads
        model_path = build_repo(
            Path(tmp) / "repo", shape, max(batches), server_threads, args.instances
        )
        for run in range(args.repeats):
            raw = raw_sweep(model_path, args.threads, batches, args.raw_seconds)
            raw_runs.append(raw)
            print(f"run {run + 1}: raw", [(r.batch, round(r.items_per_s, 1)) for r in raw])
            best = max(raw, key=lambda r: r.items_per_s)
            config_path = Path(tmp) / "repo" / "encoder" / "config.yaml"
            config = yaml.safe_load(config_path.read_text())
            config["max_batch_size"] = best.batch
            config_path.write_text(yaml.safe_dump(config))
            server = Server(Path(tmp) / "repo")
            try:
                steps = []
                run_wrk(server, "/v2/models/encoder/infer", body, 8, 2)  # warm-up
                for c in concurrencies:
                    step = run_wrk(server, "/v2/models/encoder/infer", body, c, args.load_seconds)
                    steps.append(step)
                    print(
                        f"run {run + 1}: c={c} {step.requests_per_s:.1f} req/s "
                        f"p50 {step.p50_ms:.1f} p99 {step.p99_ms:.1f} "
                        f"cpu/item {step.server_cpu_ms_per_request:.1f} ms errors {step.errors}"
                    )
                load_runs.append(steps)
            finally:
                server.stop()
        command = "python benchmarks/serving_bench.py core " + " ".join(sys.argv[1:])
        text = report(
            median_raw(raw_runs),
            median_load(load_runs),
            command.strip(),
            args.repeats,
            args.threads,
        )
    publish("core", text, args.quick)
    return 0
