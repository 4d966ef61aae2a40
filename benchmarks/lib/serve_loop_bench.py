"""Generation served over HTTP, A/B between two code trees, interleaved in one run.

`benchmarks/ab_bench.py loop` measures the step loop in process; what happens between the event
loop's sockets and the scheduler (a request read while a step holds the loop, an answer written
after it) needs the server and a client. Here both trees serve the same decoder of
`benchmarks/generate_bench.py ceiling` (GPT-2 architecture, random weights, in-place KV cache,
continuous batching) at once, each its own `inferd serve` with its tree's `src` first on
PYTHONPATH, and the rounds alternate between them (the order turned each round: this machine's
speed moves within minutes). A round is ceiling_bench's closed loop (`--in-flight` requests
without end, prompts 8-64 tokens, max_new_tokens uniform over 8-256, temperature 0.8, top-k 50,
the raw asyncio client) for `--seconds` after a warm-up, read from the server's own counters:
tokens/s, a decode step's mean rows and time, the window's share in decode steps, and a
request's time outside the decode batch: by Little's law, the requests in flight less the rows
a step, over the requests a second (reading, tokenizing, waiting for a row, the prefill, the
answer and the client's turn).

Reported: each tree's medians over the rounds, and the median of the rounds' tokens/s ratios.
Rows a step, and the time outside the batch, move little with the machine's speed, so they show
a change in how soon newcomers join where tokens/s swings with the runtime's step. (On a CPU a
16-row step's rows cost nearly all of it, 33 us a row of the demo decoder's 654 us by
`benchmarks/generate_bench.py block`'s 1- and 16-row steps, so a few tenths of a row more a
step are a percent or two of tokens/s at most; on a GPU, where a step's time hardly grows with
its rows, they are the share of rows gained.)

    python benchmarks/ab_bench.py serve-loop --variant before=HEAD~1 --variant after=HEAD
    python benchmarks/ab_bench.py serve-loop --variant before=HEAD~1 --variant after=HEAD \
        --decoder 21m --in-flight 16 --rounds 4 --seconds 8
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ceiling_bench import DECODERS
from common import (
    Server,
    alternated,
    machine_description,
    median_of,
    ratio_line,
    two_variants,
    worktree,
)
from generate_bench import build_repo, set_generation, workload
from steady import Load, steady_load


def outside_ms(load: Load, in_flight: int) -> float:
    """A request's mean time outside the decode batch (Little's law)."""
    return (in_flight - load.rows) / max(load.requests_per_s, 1e-9) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", required=True, help="NAME=REF")
    parser.add_argument("--decoder", choices=list(DECODERS), default="demo")
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=6.0, help="counted per round")
    args = parser.parse_args()
    variants = two_variants(parser, args.variant)
    case = DECODERS[args.decoder]
    results: dict[str, list[Load]] = {name: [] for name, _ in variants}
    bodies = [orjson.dumps(b) for b in workload(400, seed=args.in_flight)]
    with (
        tempfile.TemporaryDirectory(prefix="inferd-serve-loop-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        root = build_repo(Path(tmp) / "repo", case.shape, "inplace")
        set_generation(root, "scheduling", "continuous")
        servers = {}
        for name, ref in variants:
            src = stack.enter_context(worktree(ref, Path(tmp) / f"tree-{name}")) / "src"
            server = Server(root, env={"PYTHONPATH": str(src)})
            stack.callback(server.stop)
            servers[name] = server
        for round_, name in alternated(list(servers), args.rounds):
            got = steady_load(servers[name].url, args.in_flight, bodies, 2.0, args.seconds)
            results[name].append(got)
            print(
                f"round {round_ + 1} {name}: {got.tokens_per_s:.0f} tokens/s, "
                f"{got.rows:.2f} rows a step of {got.step_ms:.3f} ms, "
                f"{outside_ms(got, args.in_flight):.1f} ms outside the batch",
                flush=True,
            )
    (first, _), (second, _) = variants
    pairs = zip(results[first], results[second], strict=True)
    ratio = [b.tokens_per_s / a.tokens_per_s for a, b in pairs]
    print(f"\nMachine: {machine_description()}")
    print(f"Command: python benchmarks/ab_bench.py serve-loop {' '.join(sys.argv[1:])}\n")
    print(f"{case.name}, {args.in_flight} requests in flight\n")
    print(
        "| variant | tokens/s | rows a step | decode step ms | time in decode steps "
        "| a request outside the batch, ms |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, loads in results.items():

        def med(field: str, loads: list[Load] = loads) -> float:
            return median_of([getattr(load, field) for load in loads])

        print(
            f"| {name} | {med('tokens_per_s'):.0f} | {med('rows'):.2f} | "
            f"{med('step_ms'):.3f} | {med('step_share'):.0%} | "
            f"{median_of([outside_ms(load, args.in_flight) for load in loads]):.1f} |"
        )
    print("\n" + ratio_line(first, second, ratio, "tokens a second"))
    return 0
