"""What the server's own work between decode blocks costs the runtime's next steps.

A served decoder runs its steps in blocks (`generation.block_steps`, 4); between two blocks
the event loop's thread does the server's other work on the same cores: reading and answering
requests, tokenizing, the scheduler's bookkeeping. This measures, with no server at all, what
such a gap does to the steps that follow it: bare bound decode steps (16 rows over a 128-token
in-place cache, as `ceiling_bench`'s raw ceiling) in blocks of 4, and between the blocks

- nothing (the raw ceiling's steps, back to back);
- Python that touches almost no memory (a loop on the clock) for 0.3 or 1 ms;
- Python that reads through 32 MB (numpy sums over slices of one array) for 0.3 or 1 ms,
  which leaves the model's weights and KV cache out of the CPU's caches.

The ways are interleaved in rounds (this machine's speed moves within seconds); reported: the
median time of a block's first step and of its other steps, and each against the back-to-back
steps of its round (the median of the rounds' ratios).

    python benchmarks/gap_bench.py            # writes the "gap" section of RESULTS.md
    python benchmarks/gap_bench.py --quick
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

from common import machine_description, median_of, publish
from generate_bench import CASES, MODEL, Case, build_repo, raw_step

STEPS = 4
MEMORY = np.random.default_rng(0).standard_normal(4 << 20)  # 32 MB of float64
SLICE = 100_000


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def reading(seconds: float) -> None:
    end, at = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        MEMORY[at : at + SLICE].sum()
        at = (at + SLICE) % (MEMORY.size - SLICE)


WAYS: dict[str, Callable[[], None] | None] = {
    "back to back": None,
    "Python, little memory, 0.3 ms": lambda: busy(0.0003),
    "Python, little memory, 1 ms": lambda: busy(0.001),
    "Python reading 32 MB, 0.3 ms": lambda: reading(0.0003),
    "Python reading 32 MB, 1 ms": lambda: reading(0.001),
}


def blocks(
    step: Callable[[], None], gap: Callable[[], None] | None, seconds: float
) -> tuple[float, float]:
    """Blocks of `STEPS` steps for `seconds`, `gap` before each: (first steps, the others)."""
    first: list[float] = []
    rest: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or not rest:
        if gap is not None:
            gap()
        for k in range(STEPS):
            started = time.perf_counter()
            step()
            (rest if k else first).append(time.perf_counter() - started)
    return float(np.median(first)), float(np.median(rest))


def measure(case: Case, rounds: int, seconds: float) -> dict[str, list[tuple[float, float]]]:
    """Each way's (first step, other steps) medians, a round at a time."""
    with tempfile.TemporaryDirectory(prefix="inferd-gap-") as tmp:
        root = build_repo(Path(tmp) / "inplace", case.shape, "inplace")
        step = raw_step(root / MODEL / "1" / "model.onnx", case.shape, "inplace")
        for _ in range(10):
            step()
        seen: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
        for _ in range(rounds):
            for way, gap in WAYS.items():
                seen[way].append(blocks(step, gap, seconds))
    return seen


def report(case: Case, seen: dict[str, list[tuple[float, float]]]) -> str:
    alone = seen["back to back"]
    lines = [
        f"### {case.name}",
        "",
        "| between blocks | a block's first step, us (vs back to back) "
        "| its other steps, us (vs back to back) |",
        "|---|---|---|",
    ]
    for way, times in seen.items():
        cells = []
        for i in (0, 1):
            us = median_of([t[i] for t in times]) * 1e6
            ratio = median_of([t[i] / a[1] for t, a in zip(times, alone, strict=True)])
            cells.append(f"{us:.0f} ({ratio:.2f}x)")
        lines.append(f"| {way} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 short rounds, RESULTS.md kept")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    rounds, seconds = (2, 0.2) if args.quick else (args.rounds, 0.5)
    sections = [
        "## What the server's work between decode blocks costs the next steps",
        "",
        f"Machine: {machine_description()}",
        "",
        "Command: `python benchmarks/gap_bench.py` (no server: bare bound decode steps of 16 "
        "rows over a 128-token in-place cache, in blocks of 4, with each way's gap before "
        f"every block; the ways interleaved over {rounds} rounds of {seconds:g} s each, "
        "medians; in brackets the median of the rounds' ratios to the back-to-back steps' "
        "time, the raw ceiling's).",
    ]
    for case in CASES:
        seen = measure(case, rounds, seconds)
        sections += ["", report(case, seen)]
        print(sections[-1], flush=True)
    publish("gap", "\n".join(sections), args.quick)


if __name__ == "__main__":
    main()
