"""inferd's generation against ONNX Runtime's own decode ceiling, in the steady state.

The decoders of benchmarks/generate_bench.py (GPT-2 architecture, random weights, `ignore_eos`,
the in-place KV cache that `inferd export --kv-cache inplace` writes): the demo generator's shape
(4 layers, hidden 128) and a 21M-parameter one (6 layers, hidden 512). For each, rounds of:

1. the raw ceiling: ONNX Runtime in this process, decode steps of 16 rows over a 128-token
   cache, no sampling (the graph's own draw runs greedy), no server, the median step of 2 s
   (tokens/s; the server idle meanwhile), measured before each load and after it: a load's
   ceiling is the mean of the two beside it (this machine's speed moves within minutes);
2. inferd (`inferd serve`, continuous batching, max_running 16) under a closed loop that keeps
   16 requests in flight without end (prompts 8-64 tokens, max_new_tokens uniform over 8-256,
   temperature 0.8, top-k 50, whole answers): after a warm-up, the tokens the server made
   in a fixed window, read from its own counters (`inferd_generation_time_to_first_token_
   seconds_count` + `inferd_generation_inter_token_seconds_count`: one per token), so a round's
   drain (the last requests finishing with fewer than 16 in flight) is not counted;
3. the same with 1 request in flight.

Reported: each load's tokens/s and its ratio to the ceiling measured beside it, medians of the
rounds (the ceiling itself moves between minutes on a shared machine; each ratio is taken
against the ceilings just before and after its own window); and, from the server's step
metrics, the share of the window spent in decode steps and a decode step's mean time and rows,
to set beside the raw step's (the difference: the load's other work on the same two cores, and
rows of other lengths than the raw step's 128), and the share spent in prefills and a
prefill's mean time (the rest of the window: HTTP, tokenizing, answering, the loop's own
Python).

    python benchmarks/generate_bench.py ceiling  # writes the "ceiling" section of RESULTS.md
    python benchmarks/generate_bench.py ceiling --quick
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, median_of, publish
from generate_bench import (
    CASES,
    MODEL,
    Case,
    build_repo,
    raw_ceiling,
    set_generation,
    workload,
)
from steady import Load, steady_load

LOADS = (16, 1)
DECODERS = dict(zip(("demo", "21m"), CASES, strict=True))


@dataclass(frozen=True)
class Round:
    ceilings: dict[int, float]
    """Each load's raw ceiling: the mean of those measured just before and after it."""
    loads: dict[int, Load]


def run_case(
    case: Case, rounds: int, window_s: float, inline_step_ms: float | None, block_steps: int | None
) -> list[Round]:
    results = []
    with tempfile.TemporaryDirectory(prefix="inferd-ceiling-") as tmp:
        root = build_repo(Path(tmp) / "inplace", case.shape, "inplace")
        set_generation(root, "scheduling", "continuous")
        if inline_step_ms is not None:
            set_generation(root, "inline_step_ms", inline_step_ms)
        if block_steps is not None:
            set_generation(root, "block_steps", block_steps)
        model_file = root / MODEL / "1" / "model.onnx"
        server = Server(root)
        try:
            for _ in range(rounds):
                before = raw_ceiling(model_file, case.shape, "inplace")
                made, ceilings = {}, {}
                for load in LOADS:
                    bodies = [orjson.dumps(b) for b in workload(400, seed=load)]
                    made[load] = steady_load(server.url, load, bodies, 3.0, window_s)
                    after = raw_ceiling(model_file, case.shape, "inplace")
                    ceilings[load], before = (before + after) / 2, after
                results.append(Round(ceilings, made))
                print(case.name, "ceilings", ceilings, made, flush=True)
        finally:
            server.stop()
    return results


def report(case: Case, results: list[Round], window_s: float) -> str:
    ceiling = median_of([c for r in results for c in r.ceilings.values()])
    step = 16 / ceiling * 1000
    rows = []
    for load in LOADS:

        def med(field: str, load: int = load) -> float:
            return median_of([getattr(r.loads[load], field) for r in results])

        ratio = median_of([r.loads[load].tokens_per_s / r.ceilings[load] for r in results])
        spread = ", ".join(f"{r.loads[load].tokens_per_s / r.ceilings[load]:.0%}" for r in results)
        rows.append(
            f"| {load} | {med('tokens_per_s'):.0f} | **{ratio:.0%}** ({spread}) | "
            f"{med('step_share'):.0%} | {med('step_ms'):.2f} | {med('rows'):.1f} | "
            f"{med('prefill_share'):.0%} | {med('prefill_ms'):.2f} |"
        )
    return "\n".join(
        [
            f"#### {case.name}",
            "",
            f"{len(results)} rounds, {window_s:.0f} s windows; raw ceiling (median) "
            f"{ceiling:.0f} tokens/s, a raw step of 16 rows {step:.2f} ms.",
            "",
            "| requests in flight | inferd tokens/s | of the ceiling: median (each round) "
            "| time in decode steps | decode step ms | rows a step | time in prefills "
            "| prefill ms |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round, RESULTS.md kept")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=15.0, help="seconds counted per load")
    parser.add_argument(
        "--decoder", choices=["both", *DECODERS], default="both", help="which decoder(s)"
    )
    parser.add_argument(
        "--inline-step-ms",
        type=float,
        default=None,
        help="generation.inline_step_ms for the server (default: the setting's default); "
        "printed, RESULTS.md kept",
    )
    parser.add_argument(
        "--block-steps",
        type=int,
        default=None,
        help="generation.block_steps for the server (default: the setting's default); "
        "printed, RESULTS.md kept",
    )
    args = parser.parse_args()
    rounds, window = (1, 5.0) if args.quick else (args.rounds, args.window)
    cases = [c for key, c in DECODERS.items() if args.decoder in ("both", key)]
    inline = args.inline_step_ms
    command = ("python benchmarks/generate_bench.py ceiling " + " ".join(sys.argv[1:])).strip()
    title = "### Generation against the runtime's decode ceiling"
    block = args.block_steps
    if inline is not None:
        title += f", steps inline under {inline:g} ms"
    if block is not None:
        title += f", blocks of {block} steps"
    sections = [
        title,
        "",
        f"Machine: {machine_description()}",
        "",
        f"Command: `{command}` (GPT-2 architecture, random weights, "
        "in-place KV cache, `ignore_eos`; closed loops of 16 and 1 requests in flight without "
        "end, prompts 8-64 tokens, max_new_tokens uniform over 8-256, temperature 0.8, top-k "
        "50; the client: raw asyncio HTTP/1.1 (uvloop) on the same cores; tokens counted by "
        "the server over a window after a 3 s warm-up; each load's ratio to the raw ceiling, "
        "the mean of those measured just before and after its window: ONNX Runtime in "
        "process, decode steps of 16 rows over a 128-token cache, no sampling (the graph's "
        "draw runs greedy), no server, the median step of 2 s).",
    ]
    for case in cases:
        sections += ["", report(case, run_case(case, rounds, window, inline, block), window)]
    # RESULTS.md holds the defaults' figures: a variant's are printed only
    publish("ceiling", "\n".join(sections), args.quick or inline is not None or block is not None)
