"""The generation loop itself, A/B between two code trees: the scheduler in process (its
runtime pool, no HTTP, no client process), so that what a change to the step loop does is not
lost in what the server and the client around it cost.

The demo generator's shape (GPT-2 architecture, 4 layers, hidden 128, random weights,
in-place KV cache, the draw in the graph), continuous batching; `--in-flight` requests at
once without end (prompts of 32 random tokens, exactly 128 new tokens, temperature 0.8,
top-k 50). Each round runs one process per tree, in turn (the order turned each round: this
machine's speed moves within minutes), each measuring `--seconds` after a 1.5 s warm-up:
the median decode step as the scheduler reports it (a block's steps each with its own time),
the rows stepped a second, and the time outside the runtime's calls (the loop's Python: the
wall time less the time in ONNX Runtime's run calls) a row stepped, which the runtime's own
speed, swinging with the machine, moves far less than the rows a second. Reported: each
tree's medians over the rounds, and the median of the rounds' ratios.

    python benchmarks/ab_bench.py loop --variant before=HEAD~1 --variant after=HEAD --in-flight 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    alternated,
    machine_description,
    median_of,
    ratio_line,
    two_variants,
    worktree,
)
from generate_bench import CASES, build_repo, set_generation

MODEL_DIR = "bench-gen"

DRIVER = r"""
import asyncio, json, sys, time
from pathlib import Path
import numpy as np
from inferd.engine.kinds.decoder_parts import load_generation
from inferd.engine.versions.loading import load_instances
from inferd.generation.batch import RunningBatch
from inferd.generation.params import SamplingParams
from inferd.generation.scheduler import Scheduler
from inferd.repository.scan import scan_model
from inferd.runtime.onnx_session import OnnxSession

root, in_flight, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
entry = scan_model(root)
path = entry.versions[-1].path
loaded = load_instances(entry.config, lambda o: OnnxSession(path, o), path.parent)
parts = load_generation(entry.config, loaded.inputs, loaded.outputs, path.parent)
steps, rows_stepped, recording = [], [0], [False]
report = RunningBatch.report


def counted(self, kind, rows, took, waiting):
    if kind == "decode" and recording[0]:
        steps.extend(took)
        rows_stepped[0] += rows * len(took)
    return report(self, kind, rows, took, waiting)


RunningBatch.report = counted
in_runtime = [0.0]


def timed(run):
    def wrapped(*args, **kwargs):
        started = time.perf_counter()
        try:
            return run(*args, **kwargs)
        finally:
            in_runtime[0] += time.perf_counter() - started
    return wrapped


import onnxruntime  # the runtime's own calls, timed: the rest of the loop's time is Python's
onnxruntime.InferenceSession.run = timed(onnxruntime.InferenceSession.run)
onnxruntime.InferenceSession.run_with_iobinding = timed(
    onnxruntime.InferenceSession.run_with_iobinding
)


async def main():
    scheduler = Scheduler(
        loaded.pool.run, parts.shape, parts.tokenizer, entry.config.generation,
        parts.eos_id, parts.pad_id, run_now=loaded.pool.run_now,
    )
    scheduler.start()
    rng = np.random.default_rng(0)
    done = [False]

    async def client(i):
        while not done[0]:
            prompt = [int(t) for t in rng.integers(5, 4000, 32)]
            params = SamplingParams(128, temperature=0.8, top_k=50, ignore_eos=True, seed=i)
            await scheduler.submit(prompt, params).result()

    clients = [asyncio.create_task(client(i)) for i in range(in_flight)]
    await asyncio.sleep(1.5)
    recording[0], began, in_runtime[0] = True, time.perf_counter(), 0.0
    await asyncio.sleep(seconds)
    recording[0], took, ran = False, time.perf_counter() - began, in_runtime[0]
    done[0] = True
    step_us = float(np.median(steps)) * 1e6
    outside_us = (took - ran) / rows_stepped[0] * 1e6
    print(json.dumps({"step_us": step_us, "rows_per_s": rows_stepped[0] / took,
                      "outside_us": outside_us}))
    await asyncio.gather(*clients)
    await scheduler.close()


asyncio.run(main())
"""


def run_tree(src: Path, model: Path, in_flight: int, seconds: float) -> dict[str, float]:
    """One measurement in a fresh process on the code of `src`."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(model), str(in_flight), str(seconds)],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", required=True, help="NAME=REF")
    parser.add_argument("--in-flight", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    variants = two_variants(parser, args.variant)
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="inferd-loop-") as tmp, contextlib.ExitStack() as trees:
        root = build_repo(Path(tmp) / "repo", CASES[0].shape, "inplace")
        set_generation(root, "scheduling", "continuous")
        srcs = {
            name: trees.enter_context(worktree(ref, Path(tmp) / f"tree-{name}")) / "src"
            for name, ref in variants
        }
        for round_, name in alternated(list(srcs), args.rounds):
            got = run_tree(srcs[name], root / MODEL_DIR, args.in_flight, args.seconds)
            results[name].append(got)
            print(f"round {round_ + 1} {name}: {got}", flush=True)
    (first, _), (second, _) = variants
    pairs = zip(results[first], results[second], strict=True)
    ratio = [b["rows_per_s"] / a["rows_per_s"] for a, b in pairs]
    print(f"\nMachine: {machine_description()}")
    print(f"Command: python benchmarks/ab_bench.py loop {' '.join(sys.argv[1:])}\n")
    print(
        "| variant | decode step us (median of rounds) | rows stepped a second "
        "| outside the runtime, us a row stepped |"
    )
    print("|---|---:|---:|---:|")
    for name, rows in results.items():
        step = median_of([r["step_us"] for r in rows])
        rate = median_of([r["rows_per_s"] for r in rows])
        outside = median_of([r["outside_us"] for r in rows])
        print(f"| {name} | {step:.0f} | {rate:.0f} | {outside:.2f} |")
    print("\n" + ratio_line(first, second, ratio, "rows a second"))
    pairs = zip(results[first], results[second], strict=True)
    outside = [b["outside_us"] / a["outside_us"] for a, b in pairs]
    print(ratio_line(first, second, outside, "time outside the runtime a row"))
    return 0
