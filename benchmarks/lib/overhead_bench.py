"""Observability overhead: throughput with request logs and metrics on, against both off.

Runs the same saturating load (wrk, closed loop) against two configurations of one server, in
alternation (on, off, on, off, ...) so the machine's drift hits both alike, on the demo model's
/embed (realistic) and on a tiny model where per-request work dominates (the worst case).
Reports medians and the cost in percent.

    python benchmarks/serving_bench.py overhead  # writes the "overhead" section of RESULTS.md
    python benchmarks/serving_bench.py overhead --quick
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    Server,
    machine_description,
    median_of,
    publish,
    require_wrk,
    run_wrk,
)
from inferd.tools.demo import build_demo
from tests.models import affine_model, write_config
from tests.text_corpus import sentences

ON = ("--metrics", "--log-sample-rate", "0.01")
OFF = ("--no-metrics", "--log-sample-rate", "0")


def measure(
    repo: Path,
    path: str,
    bodies: list[bytes],
    args: tuple[str, ...],
    seconds: float,
    concurrency: int,
) -> float:
    server = Server(repo, *args)
    try:
        run_wrk(server, path, bodies, concurrency, 2)  # warm-up
        return run_wrk(server, path, bodies, concurrency, seconds).requests_per_s
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    require_wrk()
    if args.quick:
        args.rounds, args.seconds = 1, 3
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        demo = build_demo(Path(tmp) / "demo")
        tiny = Path(tmp) / "tiny"
        affine_model(tiny / "affine" / "1" / "model.onnx")
        write_config(tiny / "affine", {"max_batch_size": 64})
        texts = sentences(200)
        cases = [
            (
                "demo /embed, one text per request",
                demo,
                "/embed",
                32,
                [orjson.dumps({"model": "minilm", "texts": [t]}) for t in texts],
            ),
            (
                "tiny model, V2 JSON",
                tiny,
                "/v2/models/affine/infer",
                32,
                [
                    orjson.dumps(
                        {
                            "inputs": [
                                {
                                    "name": "x",
                                    "datatype": "FP32",
                                    "shape": [1, 4],
                                    "data": np.random.default_rng(i).random(4).tolist(),
                                }
                            ]
                        }
                    )
                    for i in range(50)
                ],
            ),
        ]
        for label, repo, path, concurrency, bodies in cases:
            on, off = [], []
            for r in range(args.rounds):
                on.append(measure(repo, path, bodies, ON, args.seconds, concurrency))
                off.append(measure(repo, path, bodies, OFF, args.seconds, concurrency))
                print(f"{label} round {r + 1}: on {on[-1]:.1f} req/s, off {off[-1]:.1f} req/s")
            rows.append((label, concurrency, median_of(on), median_of(off)))
    command = ("python benchmarks/serving_bench.py overhead " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Observability overhead: logs and metrics on vs off",
        "",
        f"Machine: {machine_description()}.",
        f"On: `{' '.join(ON)}` (the defaults); off: `{' '.join(OFF)}`. wrk, 1 thread, closed "
        f"loop, {args.seconds:.0f} s per step, on and off alternated, medians of {args.rounds} "
        "rounds.",
        "",
        f"Command: `{command}`",
        "",
        "| workload | concurrency | on req/s | off req/s | cost |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, concurrency, on_rps, off_rps in rows:
        lines.append(
            f"| {label} | {concurrency} | {on_rps:.1f} | {off_rps:.1f} | "
            f"{(off_rps - on_rps) / off_rps:+.1%} |"
        )
    text = "\n".join(lines)
    publish("overhead", text, args.quick)
    return 0
