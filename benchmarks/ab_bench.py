"""A/B of two versions of inferd's code on the demo model, interleaved in one run.

Each variant is a git ref of this repository (checked out into a temporary worktree, its
`src` first on the server's PYTHONPATH), optionally with model config overrides; every
variant's server runs on the same demo repository copy, and the rounds alternate between them
so the machine's drift (10-25% from minute to minute here) falls on all alike. Per variant:
the median over rounds of requests/s, server CPU per request (all of it, and its event loop's
thread alone: what bounds a server whose runtime is fast, such as a GPU's), padding
efficiency, and wrk's p99 latency (of every answer: a refusal held back by pacing counts).

    python benchmarks/ab_bench.py --variant old=HEAD~1 --variant new=HEAD --concurrency 64
    python benchmarks/ab_bench.py --variant w10=HEAD \
        --variant w02=HEAD:dynamic_batching.max_padding_waste=0.02
    python benchmarks/ab_bench.py --variant old=HEAD~1 --variant new=HEAD --empty
        (--empty: requests with no text, answered 4001 before any model work: the cost of
        the HTTP and dispatch layers alone)
    python benchmarks/ab_bench.py --model bert-0 --texts-per-request 32 --variant ...
        (requests of 32 texts each to a model that costs next to nothing to run: what the
        server's own work costs per request where the runtime is fast, as a GPU's)
    python benchmarks/ab_bench.py --model bert-base --lengths fixed:120 --variant ...
        (the BERT-base-sized encoder of benchmarks/serving_bench.py, random weights, on texts
        of 120 words as that benchmark sends it)
    python benchmarks/ab_bench.py --variant hop=HEAD:solo_inline_ms=0 --variant new=HEAD --lone
        (--lone: a lone request's p50 latency instead of wrk's throughput, one request at a
        time from a lean client (raw asyncio HTTP/1.1), for a text of each of LONE_TEXTS'
        lengths in turn, `--seconds` split between them: differences of a few tenths of a
        millisecond, which wrk's requests/s at one connection does not resolve here)
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import orjson
import yaml
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    Server,
    machine_description,
    median_of,
    parts_help,
    require_wrk,
    run_entry,
    run_wrk,
    worktree,
)
from inferd.bench.workload import Lengths, generate_texts
from inferd.tools.demo import build_demo
from overload_bench import lone_latencies, request_bytes
from served_profile import snapshot
from texts import apply_overrides, make_texts, stats

ROOT = Path(__file__).resolve().parents[1]
LONE_TEXTS = {"2 words": 2, "24 words": 24, "90 words": 90}
"""The lone requests' texts, by their words (the demo model takes 1-12 ms for them here)."""


@dataclass(frozen=True)
class Variant:
    name: str
    ref: str
    overrides: dict[str, object]


PARTS = {
    "heap": ("heap_bench", "two code trees: the garbage collector's pauses under load"),
    "loop": ("loop_bench", "two code trees: the generation loop in process, no HTTP"),
    "serve-loop": ("serve_loop_bench", "two code trees: the generation loop served, through HTTP"),
}


def parse_variant(text: str) -> Variant:
    """NAME=REF[:dotted.key=value...]"""
    name, _, rest = text.partition("=")
    ref, *sets = rest.split(":")
    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in sets)}
    return Variant(name, ref, overrides)


def configure(repo: Path, model: str, overrides: dict[str, object]) -> None:
    path = repo / model / "config.yaml"
    path.write_text(yaml.safe_dump(apply_overrides(yaml.safe_load(path.read_text()), overrides)))


def measure(
    servers: dict[str, Server],
    bodies: list[bytes],
    rounds: int,
    concurrency: int,
    seconds: float,
    model: str,
) -> dict[str, list[tuple[float, float, float, float, float]]]:
    """Per variant, per round: requests/s, server CPU ms per request (all threads, and the
    event loop's), padding efficiency, p99 ms (wrk's)."""
    results: dict[str, list[tuple[float, float, float, float, float]]] = {n: [] for n in servers}
    for server in servers.values():
        run_wrk(server, "/embed", bodies, 16, 2)  # warm-up
    for round_ in range(rounds):
        for name, server in servers.items():
            before = stats(server, model)
            loop_before = snapshot(server.url, server.process.pid, model).loop_cpu_s
            step = run_wrk(server, "/embed", bodies, concurrency, seconds)
            loop_s = snapshot(server.url, server.process.pid, model).loop_cpu_s - loop_before
            after = stats(server, model)
            padded = after["padded"] - before["padded"]
            padding = (after["real"] - before["real"]) / padded if padded else 1.0
            loop_ms = loop_s * 1000 / max(step.requests, 1)
            results[name].append(
                (step.requests_per_s, step.server_cpu_ms_per_request, loop_ms, padding, step.p99_ms)
            )
            print(
                f"round {round_ + 1} {name}: {step.requests_per_s:.1f} req/s, "
                f"{step.server_cpu_ms_per_request:.2f} ms CPU/req (event loop {loop_ms:.2f}), "
                f"padding {padding:.1%}, p99 {step.p99_ms:.0f} ms"
                + (f", {step.errors} not 2xx" if step.errors else ""),
                flush=True,
            )
    return results


def measure_lone(
    servers: dict[str, Server], rounds: int, seconds: float, model: str
) -> dict[str, list[list[float]]]:
    """Per variant, per round: the p50 ms of a lone request for each of `LONE_TEXTS`."""
    results: dict[str, list[list[float]]] = {n: [] for n in servers}
    each = seconds / len(LONE_TEXTS)
    for round_ in range(rounds):
        for name, server in servers.items():
            host = urlparse(server.url).netloc
            p50s = []
            for words in LONE_TEXTS.values():
                body = orjson.dumps({"texts": [" ".join(["word"] * words)], "model": model})
                payload = request_bytes(host, body, "/embed")
                lone_latencies(server.url, [payload], 0.3)  # warm this text's path
                p50s.append(float(np.median(lone_latencies(server.url, [payload], each))) * 1000)
            results[name].append(p50s)
            shown = ", ".join(f"{k} {v:.3f} ms" for k, v in zip(LONE_TEXTS, p50s, strict=True))
            print(f"round {round_ + 1} {name}: {shown}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=parts_help(PARTS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--variant", action="append", required=True, type=parse_variant)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--empty", action="store_true", help="bodies with no text (4001)")
    parser.add_argument("--lone", action="store_true", help="a lone request's p50 (lean client)")
    parser.add_argument(
        "--model",
        choices=("minilm", "bert-base", "bert-0"),
        default="minilm",
        help="bert-0: BERT-base's embeddings without layers, a model that costs next to "
        "nothing to run (what the server costs where the runtime is fast, as a GPU's)",
    )
    parser.add_argument("--texts-per-request", type=int, default=1, help="texts in each body")
    parser.add_argument(
        "--lengths",
        help="texts as `inferd bench` makes them (fixed:120, loguniform:8-100 words); "
        "default: token counts log-uniform over 8-128",
    )
    args = parser.parse_args()
    if not args.lone:
        require_wrk()
    with tempfile.TemporaryDirectory(prefix="inferd-ab-") as tmp:
        if args.model == "minilm":
            base = build_demo(Path(tmp) / "demo")
        else:
            from serving_bench import build_repo

            layers = 0 if args.model == "bert-0" else 12
            base = build_repo(Path(tmp) / "demo", layers, args.model)
        tokenizer = Tokenizer.from_file(str(base / "minilm" / "1" / "tokenizer.json"))
        tokenizer.no_padding()
        if args.empty:
            texts: list[list[str]] = [[]]
        elif args.lengths:
            texts = [[t] for t in generate_texts(1024, Lengths.parse(args.lengths), 0)]
        else:
            texts = [[t] for t in make_texts(tokenizer, 1024)]
        per = args.texts_per_request
        if per > 1 and not args.empty:  # each body the next `per` texts, wrapping around
            flat = [t for group in texts for t in group]
            texts = [[flat[(i * per + k) % len(flat)] for k in range(per)] for i in range(1024)]
        bodies = [orjson.dumps({"texts": t, "model": args.model}) for t in texts]
        servers: dict[str, Server] = {}
        with contextlib.ExitStack() as trees:
            try:
                for v in args.variant:
                    tree = trees.enter_context(worktree(v.ref, Path(tmp) / f"tree-{v.name}"))
                    repo = Path(tmp) / f"repo-{v.name}"
                    shutil.copytree(base, repo)
                    configure(repo, args.model, v.overrides)
                    servers[v.name] = Server(repo, env={"PYTHONPATH": str(tree / "src")})
                if args.lone:
                    lone = measure_lone(servers, args.rounds, args.seconds, args.model)
                else:
                    results = measure(
                        servers, bodies, args.rounds, args.concurrency, args.seconds, args.model
                    )
            finally:
                for server in servers.values():
                    server.stop()
    print(f"\nMachine: {machine_description()}")
    print(f"Command: python benchmarks/ab_bench.py {' '.join(sys.argv[1:])}\n")
    if args.lone:
        print(lone_table(lone))
        return 0
    print(
        "| variant | req/s | server CPU ms/req | event loop CPU ms/req | padding efficiency "
        "| p99 ms |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        print(
            f"| {name} | {median_of([r[0] for r in rows]):.1f} | "
            f"{median_of([r[1] for r in rows]):.3f} | {median_of([r[2] for r in rows]):.3f} | "
            f"{median_of([r[3] for r in rows]):.1%} | {median_of([r[4] for r in rows]):.0f} |"
        )
    return 0


def lone_table(lone: dict[str, list[list[float]]]) -> str:
    """Each variant's median p50 per text; then each variant's change from the first, the
    median of the rounds' differences (within a round the variants run seconds apart)."""
    names = list(lone)
    heads = " | ".join(f"p50 ms, {k}" for k in LONE_TEXTS)
    lines = [f"| variant | {heads} |", "|---|" + "---:|" * len(LONE_TEXTS)]
    for name in names:
        cols = zip(*lone[name], strict=True)
        lines.append(f"| {name} | " + " | ".join(f"{median_of(list(c)):.2f}" for c in cols) + " |")
    first = lone[names[0]]
    for name in names[1:]:
        diffs = [
            median_of([b[i] - a[i] for a, b in zip(first, lone[name], strict=True)])
            for i in range(len(LONE_TEXTS))
        ]
        shown = ", ".join(f"{k} {d:+.2f} ms" for k, d in zip(LONE_TEXTS, diffs, strict=True))
        lines.append(f"\n{name} against {names[0]}, the median of the rounds' differences: {shown}")
    return "\n".join(lines)


if __name__ == "__main__":
    run_entry(main, PARTS)
