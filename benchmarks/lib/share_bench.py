"""Two models on one machine's cores: what an encoder gets beside a generating decoder, alone
and together, and how long a cold model's first request waits while a hot one is busy.

The models: the demo's `minilm` (embeddings; three single-threaded instances and a solo
instance on every core, as the demo configures it), a copy of it that no traffic touches until
the cold request (`cold`), and a decoder of the demo generator's shape (4 layers, hidden 128,
KV cache in place, random weights: with `ignore_eos` every generation runs its full length),
`gen`, on ONNX Runtime's default threads (every core). Closed loops: `--embed-clients` clients
send `/embed` of one sentence (a different one each time); `--gen-clients` clients send
`/generate` of 128 new tokens, whole answers. Three phases of `--seconds` each on one server:
embed alone, generate alone, both together; then, with the generators still running, one
`/embed` to `cold`, against the same to a second cold copy with the server idle. Reported per
model and phase: answers a second, p50/p99 (client side), and for together the fraction of
alone. `--before REF` runs the same on a checkout of REF first (the code before a change), on
the same machine in the same run.

    python benchmarks/generate_bench.py share                   # its section of RESULTS.md
    python benchmarks/generate_bench.py share --before HEAD~3
    python benchmarks/generate_bench.py share --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish, worktree
from inferd.corpus import sentences
from inferd.tools.demo import build_demo
from inferd.tools.generator import GeneratorShape, build_generator

NEW_TOKENS = 128
TOKEN_COUNTS = re.compile(
    r"^inferd_generation_(?:time_to_first_token|inter_token)_seconds_count\{[^}]*\} ([0-9.e+]+)$",
    re.MULTILINE,
)
COLD = ("cold-idle", "cold-busy")


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    embed_ms: list[float] = field(default_factory=list)
    gen_ms: list[float] = field(default_factory=list)
    tokens: float = 0.0
    """Generated within the phase, by the server's own count (a generation that spans the
    phase's end counts what it made in it)."""
    errors: int = 0


@dataclass
class Run:
    tree: str
    phases: dict[str, Phase] = field(default_factory=dict)
    cold_ms: dict[str, float] = field(default_factory=dict)


def build_repo(root: Path, weights: dict[str, float]) -> Path:
    demo = build_demo(root / "demo")
    repo = root / "repo"
    config = yaml.safe_load((demo / "minilm" / "config.yaml").read_text())
    config.pop("default", None)
    config.pop("response_cache", None)
    for name in ("minilm", *COLD):
        version = repo / name / "1"
        version.mkdir(parents=True)
        for item in (demo / "minilm" / "1").iterdir():
            (version / item.name).symlink_to(item)
        own = dict(config, **({"weight": weights[name]} if name in weights else {}))
        (repo / name / "config.yaml").write_text(yaml.safe_dump(own))
    build_generator(
        repo,
        "gen",
        steps=0,
        shape=GeneratorShape(),
        corpus_chars=200_000,
        kv_cache="inplace",
        config={"weight": weights["gen"]} if "gen" in weights else None,
    )
    return repo


async def embed_loop(http: httpx.AsyncClient, phase: Phase, texts: Iterator[str], stop: float):
    while time.perf_counter() < stop:
        sent = time.perf_counter()
        body = {"model": "minilm", "texts": [next(texts)]}
        response = await http.post("/embed", content=orjson.dumps(body))
        if response.status_code != 200:
            phase.errors += 1
            continue
        phase.embed_ms.append((time.perf_counter() - sent) * 1000)


async def gen_loop(http: httpx.AsyncClient, phase: Phase, prompts: Iterator[str], stop: float):
    while time.perf_counter() < stop:
        sent = time.perf_counter()
        body = {
            "model": "gen",
            "prompt": next(prompts),
            "max_length": NEW_TOKENS,
            "ignore_eos": True,
            "temperature": 0.8,
            "top_k": 50,
        }
        response = await http.post("/generate", content=orjson.dumps(body))
        if response.status_code != 200:
            phase.errors += 1
            continue
        phase.gen_ms.append((time.perf_counter() - sent) * 1000)


async def cold_request(http: httpx.AsyncClient, model: str, text: str) -> float:
    sent = time.perf_counter()
    response = await http.post("/embed", content=orjson.dumps({"model": model, "texts": [text]}))
    response.raise_for_status()
    return (time.perf_counter() - sent) * 1000


async def drive(url: str, args: argparse.Namespace, run: Run) -> None:
    pool = sentences(2000)
    texts = (pool[i % len(pool)] + f" ({i})" for i in range(10**9))
    prompts = (" ".join(pool[i % len(pool)].split()[:24]) for i in range(10**9))
    limits = httpx.Limits(max_connections=args.embed_clients + args.gen_clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        # warm: a few of each, not counted
        await asyncio.gather(
            *(cold_request(http, "minilm", next(texts)) for _ in range(4)),
            gen_loop(http, Phase("warm"), prompts, time.perf_counter()),
        )
        run.cold_ms[COLD[0]] = await cold_request(http, COLD[0], next(texts))
        for name, embed, gen in (
            ("embed alone", True, False),
            ("generate alone", False, True),
            ("together", True, True),
        ):
            phase = run.phases[name] = Phase(name)
            tokens = await tokens_made(http)
            started = time.perf_counter()
            stop = started + args.seconds
            embedders = embed * args.embed_clients
            loops = [embed_loop(http, phase, texts, stop) for _ in range(embedders)]
            loops += [gen_loop(http, phase, prompts, stop) for _ in range(gen * args.gen_clients)]
            if name == "together":
                loops.append(cold_later(http, run, next(texts), args.seconds / 2))
            await asyncio.gather(*loops)
            phase.seconds = time.perf_counter() - started
            phase.tokens = await tokens_made(http) - tokens


async def tokens_made(http: httpx.AsyncClient) -> float:
    """Tokens the server generated so far (first tokens and the ones after)."""
    text = (await http.get("/metrics")).text
    return sum(float(count) for count in TOKEN_COUNTS.findall(text))


async def cold_later(http: httpx.AsyncClient, run: Run, text: str, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    run.cold_ms[COLD[1]] = await cold_request(http, COLD[1], text)


def one_run(repo: Path, tree: str, args: argparse.Namespace, env: dict[str, str]) -> Run:
    server = Server(repo, env=env)
    try:
        run = Run(tree)
        asyncio.run(drive(server.url, args, run))
        return run
    finally:
        server.stop()


def rate_cells(values: list[float], seconds: float, alone: float | None) -> str:
    rate = len(values) / seconds
    p50, p99 = np.percentile(values, [50, 99]) if values else (float("nan"),) * 2
    share = "" if alone is None else f"{rate / alone:.2f}"
    return f"{rate:.1f} | {share} | {p50:.0f} | {p99:.0f}"


def rows(run: Run) -> list[str]:
    embed_alone = run.phases["embed alone"]
    gen_alone = run.phases["generate alone"]
    lines = []
    for phase in run.phases.values():
        alone = phase.name == "together"
        embed = gen = "- | | - | -"
        if phase.embed_ms:
            base = len(embed_alone.embed_ms) / embed_alone.seconds if alone else None
            embed = rate_cells(phase.embed_ms, phase.seconds, base)
        if phase.gen_ms:
            base = len(gen_alone.gen_ms) / gen_alone.seconds if alone else None
            gen = rate_cells(phase.gen_ms, phase.seconds, base)
        tokens = phase.tokens / phase.seconds
        of_tokens = ""
        if alone and gen_alone.tokens:
            of_tokens = f"{tokens / (gen_alone.tokens / gen_alone.seconds):.2f}"
        lines.append(
            f"| {run.tree} | {phase.name} | {embed} | {gen} | {tokens:.0f} | {of_tokens} "
            f"| {phase.errors} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--embed-clients", type=int, default=4)
    parser.add_argument("--gen-clients", type=int, default=8)
    parser.add_argument("--before", metavar="REF", help="also run on a checkout of REF, first")
    parser.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="MODEL=W",
        help="a model's weight in its config.yaml (minilm, gen); default: none written (1)",
    )
    parser.add_argument("--quick", action="store_true", help="5 s phases, RESULTS.md kept")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 5
    weights = {k: float(v) for k, v in (w.split("=", 1) for w in args.weight)}
    load_before = os.getloadavg()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="inferd-share-") as tmp:
        repo = build_repo(Path(tmp), weights)
        trees: list[tuple[str, str | None]] = [("this tree", None)]
        if args.before:
            trees.insert(0, (f"before ({args.before})", args.before))
        for name, ref in trees:
            with contextlib.ExitStack() as stack:
                env = {}
                if ref is not None:
                    checkout = stack.enter_context(worktree(ref, Path(tmp) / "before"))
                    env = {"PYTHONPATH": str(checkout / "src")}
                run = one_run(repo, name, args, env)
            runs.append(run)
            for line in rows(run):
                print(line, flush=True)
    load_after = os.getloadavg()
    command = ("python benchmarks/generate_bench.py share " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Two models on one machine's cores: an encoder beside a generating decoder",
        "",
        f"Machine: {machine_description()}; load average (1 min) {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after; the load generator on the same cores.",
        f"`minilm` (the demo's embedding model) and `gen` (the demo generator's shape, random "
        f"weights, KV cache in place). {args.embed_clients} closed-loop clients send `/embed` "
        f"of one sentence; {args.gen_clients} send `/generate` of {NEW_TOKENS} tokens "
        f"(`ignore_eos`). {args.seconds:g} s a phase, one server a tree. Weights: "
        + (", ".join(f"{k} {v:g}" for k, v in weights.items()) or "none set (equal)")
        + ". `of alone`: together over alone (the generator's by its tokens a second, "
        "counted by the server as they are made; its answers take seconds each).",
        "",
        f"Command: `{command}`",
        "",
        "| tree | phase | embed answers/s | of alone | embed p50 ms | embed p99 ms "
        "| generate answers/s | of alone | generate p50 ms | generate p99 ms | tokens/s "
        "| of alone | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
        *(line for run in runs for line in rows(run)),
        "",
        "A cold model's first `/embed` (a copy of `minilm` no request touched before), ms:",
        "",
        "| tree | server idle | while `gen` generates and `minilm` embeds |",
        "| --- | ---: | ---: |",
        *(
            f"| {run.tree} | {run.cold_ms.get(COLD[0], float('nan')):.0f} "
            f"| {run.cold_ms.get(COLD[1], float('nan')):.0f} |"
            for run in runs
        ),
    ]
    publish("share", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
