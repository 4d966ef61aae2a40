"""What a decode step costs in a block (`run_steps`: the block one call, its inputs bound
once) against a call a step (each step's small inputs bound again): what the serving loop
adds to the runtime's own step, without the rest of the loop around it.

The demo generator's shape (GPT-2 architecture, 4 layers, hidden 128, random weights, in-place
KV cache, the draw in the graph), 16 rows at position 100, blocks of 8 steps; the two ways
interleaved over 300 rounds (this machine's speed moves within seconds), medians.

    python benchmarks/block_bench.py            # writes the "block" section of RESULTS.md
    python benchmarks/block_bench.py --quick
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import machine_description, publish
from generate_bench import CASES, MODEL, build_repo
from inferd.engine.loading import load_instances
from inferd.generation.decoder import NEXT_IDS, TOKENS
from inferd.generation.kvstore import kv_store
from inferd.generation.params import SamplingParams
from inferd.generation.sampling import draw_inputs
from inferd.repository.scan import scan_model
from inferd.runtime.onnx_session import OnnxSession
from inferd.runtime.protocol import Repeat

ROWS = 16
POSITION = 100
STEPS = 8


def measure(rounds: int) -> dict[str, float]:
    """Each way's median time a step (us)."""
    with tempfile.TemporaryDirectory(prefix="inferd-block-") as tmp:
        root = build_repo(Path(tmp) / "inplace", CASES[0].shape, "inplace")
        entry = scan_model(root / MODEL)
        assert entry.config is not None
        path = entry.versions[-1].path
        loaded = load_instances(entry.config, lambda o: OnnxSession(path, o), path.parent)
        assert loaded.generation is not None
        session = loaded.pool.first
        assert isinstance(session, OnnxSession)
        shape = loaded.generation.shape
        kv = kv_store(shape, entry.config.generation)
        prefill = kv.prefill([[5] * 20] * ROWS, list(range(ROWS)), 0)
        session.run(prefill.feeds, [], prefill.into)
        kv.take_prefill(prefill, {})
        step = kv.decode(np.full(ROWS, 7), np.full(ROWS, POSITION))
        feeds = step.feeds
        draw = [SamplingParams(100, temperature=0.8, top_k=50)] * ROWS
        feeds.update(draw_inputs(draw, np.full(ROWS, 0.5), shape.top_width))
        into = {**step.into, NEXT_IDS: TOKENS}

        def call_a_step() -> None:
            for _ in range(STEPS):
                session.run(feeds, (), into)

        def block() -> None:
            session.run_steps(feeds, (), into, Repeat(STEPS, lambda k: True))

        ways: dict[str, Callable[[], None]] = {
            "a call a step": call_a_step,
            "a block, bound once": block,
        }
        took: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, way in ways.items():
                began = time.perf_counter()
                way()
                took[name].append((time.perf_counter() - began) / STEPS)
        return {name: float(np.median(t)) * 1e6 for name, t in took.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 rounds, RESULTS.md kept")
    args = parser.parse_args()
    rounds = 30 if args.quick else 300
    costs = measure(rounds)
    rows = [f"| {name} | {us:.0f} |" for name, us in costs.items()]
    text = "\n".join(
        [
            "## A decode step in a block against a call a step (issue 20)",
            "",
            f"Machine: {machine_description()}",
            "",
            f"Command: `python benchmarks/block_bench.py` (the demo generator's shape, in-place "
            f"KV cache, the draw in the graph; {ROWS} rows at position {POSITION}, blocks of "
            f"{STEPS} steps; the two ways interleaved over {rounds} rounds, medians).",
            "",
            "| way | us a step |",
            "|---|---|",
            *rows,
        ]
    )
    publish("block", text, args.quick)


if __name__ == "__main__":
    main()
