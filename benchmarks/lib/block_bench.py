"""What a decode step costs in a block (`run_steps`: the block one call, its inputs bound
once) against a call a step, and against a block whose small inputs are new arrays (bound
again, as every block's were before the decode step's inputs became the KV store's own
buffers): what the serving loop adds to the runtime's own step (the bare
`run_with_iobinding`, back to back), without the rest of the loop around it.

The demo generator's shape (GPT-2 architecture, 4 layers, hidden 128, random weights, in-place
KV cache, the draw in the graph), 1 and 16 rows at position 100, blocks of 4 steps (the
default `block_steps`); the ways interleaved over 300 rounds (this machine's speed moves
within seconds), medians, and the median of each round's difference to the bare runtime.

    python benchmarks/generate_bench.py block  # an experiment: printed, not in RESULTS.md
    python benchmarks/generate_bench.py block --quick
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

from common import machine_description
from generate_bench import CASES, MODEL, build_repo
from inferd.engine.versions.loading import load_instances
from inferd.generation.decoder import NEXT_IDS, TOKENS
from inferd.generation.kv_layout import kv_store
from inferd.generation.params import SamplingParams
from inferd.generation.sampling import draw_inputs
from inferd.repository.scan import scan_model
from inferd.runtime.onnx_session import OnnxSession
from inferd.runtime.protocol import Repeat

ROWS = (1, 16)
POSITION = 100
STEPS = 4


def measure(rows: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Each way's median time a step and median paired difference to the bare runtime (us)."""
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
        prefill = kv.prefill([[5] * 20] * rows, list(range(rows)), 0)
        session.run(prefill.feeds, [], prefill.into)
        kv.take_prefill(prefill, {})
        step = kv.decode(np.full(rows, 7), np.full(rows, POSITION))
        feeds = step.feeds
        draw = [SamplingParams(100, temperature=0.8, top_k=50)] * rows
        for name, values in draw_inputs(draw, np.full(rows, 0.5), shape.top_width).items():
            feeds[name][...] = values
        into = {**step.into, NEXT_IDS: TOKENS}
        small = [name for name in feeds if name not in into.values()]
        every = Repeat(STEPS, lambda k: True)
        session.run_steps(feeds, (), into, every)
        binding = session._bindings.kept(feeds, [], into).binding

        def bare() -> None:
            for _ in range(STEPS):
                session._session.run_with_iobinding(binding)

        def call_a_step() -> None:
            for _ in range(STEPS):
                session.run(feeds, (), into)

        def block() -> None:
            session.run_steps(feeds, (), into, every)

        def block_new_inputs() -> None:
            fresh = {n: (a.copy() if n in small else a) for n, a in feeds.items()}
            session.run_steps(fresh, (), into, every)

        ways: dict[str, Callable[[], None]] = {
            "the runtime alone (its bound run, back to back)": bare,
            "a call a step": call_a_step,
            "a block, small inputs new arrays (bound again)": block_new_inputs,
            "a block, the store's own buffers (bound once)": block,
        }
        took: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, way in ways.items():
                began = time.perf_counter()
                way()
                took[name].append((time.perf_counter() - began) / STEPS * 1e6)
        base = np.array(took["the runtime alone (its bound run, back to back)"])
        return {
            name: (float(np.median(t)), float(np.median(np.array(t) - base)))
            for name, t in took.items()
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 rounds")
    args = parser.parse_args()
    rounds = 30 if args.quick else 300
    measured = {rows: measure(rows, rounds) for rows in ROWS}
    lines = []
    for name in measured[ROWS[0]]:
        cells = " | ".join(
            f"{measured[r][name][0]:.0f} ({measured[r][name][1]:+.0f})" for r in ROWS
        )
        lines.append(f"| {name} | {cells} |")
    heads = " | ".join(f"{r} row{'s' if r > 1 else ''}: us a step (vs alone)" for r in ROWS)
    text = "\n".join(
        [
            "### A decode step in a block against a call a step",
            "",
            f"Machine: {machine_description()}",
            "",
            "Command: `python benchmarks/generate_bench.py block` (the demo generator's shape, "
            f"in-place KV cache, the draw in the graph; {' and '.join(map(str, ROWS))} rows at "
            f"position {POSITION}, blocks of {STEPS} steps; the ways interleaved over {rounds} "
            "rounds, medians; in brackets the median of the rounds' differences to the runtime "
            "alone).",
            "",
            f"| way | {heads} |",
            "|---|" + "---|" * len(ROWS),
            *lines,
        ]
    )
    print(text)
