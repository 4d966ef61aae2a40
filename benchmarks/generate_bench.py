"""Continuous vs static batching for text generation, on one machine, in one run.

Two GPT-2-architecture decoders, the demo generator's shape (4 layers, hidden 128, vocabulary
4096) and a larger one (6 layers, hidden 512), with random weights so that with `ignore_eos`
every request runs to exactly its own max_new_tokens, are each served twice by inferd:
`scheduling: continuous` and `scheduling: static`, both with max_running 16. A closed-loop
client keeps 16 requests in flight (whole answers, not streamed: a Python client parsing every
token event would share the 2 cores with the server and blur both modes alike), each with a
prompt of 8-64 tokens, the same requests for both modes, in two mixes of output lengths:
uniform over 8-256, and log-uniform over 8-256 (as many 8-16 as 128-256: short answers
common, as in chat traffic). Reported per mix and mode (median of the rounds, modes
interleaved): generated tokens per second, time to first token p50/p99 (as the server reports
it in each answer: from arrival to the first token, queue and prefill included), request
latency p50/p99 (client side). Also the raw ceiling: ONNX Runtime in process running decode
steps of 16 rows over a 128-token cache, no server, no sampling.

    python benchmarks/generate_bench.py            # writes the "generate" section of RESULTS.md
    python benchmarks/generate_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, median_of, publish
from inferd.runtime.kv_names import PAST, cache_names
from inferd.tools.corpus import sentences
from inferd.tools.generator import GeneratorShape, build_generator

MODEL = "bench-gen"


@dataclass(frozen=True)
class Case:
    name: str
    shape: GeneratorShape
    requests: int
    rounds: int


CASES = (
    Case("demo shape: 4 layers, hidden 128 (1.4M parameters)", GeneratorShape(), 160, 3),
    Case("6 layers, hidden 512 (21M parameters)",
         GeneratorShape(layers=6, heads=8, hidden=512, context=512), 96, 2),
)  # fmt: skip
CONCURRENCY = 16
MIXES = ("uniform", "log-uniform")
MODES = ("continuous", "static")


@dataclass(frozen=True)
class RoundResult:
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    requests: int
    errors: int


def new_tokens(rng: random.Random, mix: str) -> int:
    """uniform: 8-256 evenly; log-uniform: as many 8-16 as 128-256 (short answers common)."""
    if mix == "uniform":
        return rng.randint(8, 256)
    return round(math.exp(rng.uniform(math.log(8), math.log(256))))


def workload(count: int, seed: int = 0, mix: str = "uniform") -> list[dict[str, object]]:
    rng = random.Random(seed)
    texts = sentences(400)
    bodies = []
    for _ in range(count):
        words = " ".join(rng.sample(texts, 3)).split()
        bodies.append({
            "prompt": " ".join(words[: rng.randint(6, 45)]),
            "max_length": new_tokens(rng, mix), "temperature": 0.8, "top_k": 50,
            "seed": rng.randint(0, 10**6), "ignore_eos": True,
        })  # fmt: skip
    return bodies


async def closed_loop(url: str, bodies: list[dict[str, object]]) -> RoundResult:
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    ttfts: list[float] = []
    latencies: list[float] = []
    tokens = 0
    errors = 0
    limits = httpx.Limits(max_connections=CONCURRENCY)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal tokens, errors
        while not queue.empty():
            body = queue.get_nowait()
            sent = time.perf_counter()
            response = await http.post("/generate", content=orjson.dumps(body))
            end = time.perf_counter()
            if response.status_code != 200:
                errors += 1
                continue
            done = orjson.loads(response.content)
            tokens += int(done["usage"]["completion_tokens"])
            ttfts.append(float(done["time_to_first_token_ms"]) / 1000)  # the server's clock
            latencies.append(end - sent)

    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    t = np.percentile(np.array(ttfts) * 1000, [50, 99])
    lat = np.percentile(np.array(latencies) * 1000, [50, 99])
    return RoundResult(tokens / elapsed, float(t[0]), float(t[1]), float(lat[0]), float(lat[1]),
                       len(latencies), errors)  # fmt: skip


def raw_ceiling(model_file: Path, shape: GeneratorShape, rows: int = CONCURRENCY,
                past: int = 128) -> float:  # fmt: skip
    """Tokens/s of bare decode steps (rows x 1 token over a `past`-token cache) in process."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {
        "input_ids": np.ones((rows, 1), dtype=np.int64),
        "attention_mask": np.ones((rows, past + 1), dtype=np.int64),
        "position_ids": np.full((rows, 1), past, dtype=np.int64),
    }
    head_dim = shape.hidden // shape.heads
    for i, name in enumerate(cache_names(shape.layers, PAST)):
        feeds[name] = np.random.default_rng(i).standard_normal(
            (rows, shape.heads, past, head_dim)).astype(np.float32)  # fmt: skip
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(30):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return rows / float(np.median(times))


def build_repo(root: Path, shape: GeneratorShape) -> Path:
    build_generator(root, MODEL, steps=0, shape=shape, corpus_chars=400_000, init_std=0.02,
                    config={"generation": {
        "context_length": shape.context, "max_new_tokens": 64, "max_new_tokens_limit": 256,
        "max_running": CONCURRENCY, "max_kv_tokens": CONCURRENCY * (shape.context + 64),
        "eos_token_id": 0, "max_waiting": 1024,
    }})  # fmt: skip
    return root


def set_scheduling(root: Path, mode: str) -> None:
    path = root / MODEL / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["generation"]["scheduling"] = mode
    path.write_text(yaml.safe_dump(config, sort_keys=False))


Results = dict[tuple[str, str], list[RoundResult]]


def run_case(case: Case, quick: bool) -> tuple[Results, float]:
    requests = 48 if quick else case.requests
    bodies = {mix: workload(requests, mix=mix) for mix in MIXES}
    results: Results = {(mix, mode): [] for mix in MIXES for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="inferd-genbench-") as tmp:
        root = build_repo(Path(tmp), case.shape)
        ceiling = raw_ceiling(root / MODEL / "1" / "model.onnx", case.shape)
        for _ in range(1 if quick else case.rounds):
            for mode in MODES:
                set_scheduling(root, mode)
                server = Server(root)
                try:
                    asyncio.run(closed_loop(server.url, bodies["uniform"][:16]))  # warm-up
                    for mix in MIXES:
                        result = asyncio.run(closed_loop(server.url, bodies[mix]))
                        results[(mix, mode)].append(result)
                        print(case.name, mix, mode, result, flush=True)
                finally:
                    server.stop()
    return results, ceiling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round, RESULTS.md kept")
    args = parser.parse_args()
    sections = [
        "## Text generation: continuous vs static batching (issue 8)",
        "",
        f"Machine: {machine_description()}",
        "",
        "Command: `python benchmarks/generate_bench.py` (GPT-2 architecture, random weights, "
        f"`ignore_eos`; closed loop of {CONCURRENCY} clients, whole answers (time to first "
        "token as the server reports it), prompts 8-64 tokens, "
        f"temperature 0.8, top-k 50; max_running {CONCURRENCY}; medians of the rounds, modes "
        "interleaved). max_new_tokens over 8-256: uniform, or log-uniform (as many 8-16 as "
        "128-256).",
    ]
    for case in CASES:
        results, ceiling = run_case(case, args.quick)
        rounds = 1 if args.quick else case.rounds
        requests = 48 if args.quick else case.requests
        sections += ["", report(case, results, ceiling, requests, rounds)]
    publish("generate", "\n".join(sections), args.quick)


def report(case: Case, results: Results, ceiling: float, requests: int, rounds: int) -> str:
    def med(mix: str, mode: str, field: str) -> float:
        return median_of([getattr(r, field) for r in results[(mix, mode)]])

    rows, verdicts = [], []
    for mix in MIXES:
        for mode in MODES:
            rows.append(
                f"| {mix} | {mode} | {med(mix, mode, 'tokens_per_s'):.0f} | "
                f"{med(mix, mode, 'ttft_p50_ms'):.0f} | {med(mix, mode, 'ttft_p99_ms'):.0f} | "
                f"{med(mix, mode, 'latency_p50_ms'):.0f} | "
                f"{med(mix, mode, 'latency_p99_ms'):.0f} | "
                f"{sum(r.errors for r in results[(mix, mode)])} |"
            )
        speed = med(mix, "continuous", "tokens_per_s") / med(mix, "static", "tokens_per_s")
        ttft = med(mix, "static", "ttft_p99_ms") / med(mix, "continuous", "ttft_p99_ms")
        verdicts.append(
            f"- {mix}: continuous batching gives **{speed:.2f}x** the tokens per second of "
            f"static batching, with a **{ttft:.1f}x** lower p99 time to first token; "
            f"{med(mix, 'continuous', 'tokens_per_s') / ceiling:.0%} of the raw ceiling."
        )
    return "\n".join([
        f"### {case.name}",
        "",
        f"{requests} requests per mix, {rounds} round(s).",
        "",
        "| max_new_tokens | scheduling | tokens/s | TTFT p50 ms | TTFT p99 ms | latency p50 ms "
        "| latency p99 ms | errors |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        *verdicts,
        "",
        f"Raw ceiling: ONNX Runtime in process, decode steps of {CONCURRENCY} rows over a "
        f"128-token cache, no sampling, no server: {ceiling:.0f} tokens/s.",
    ])  # fmt: skip


if __name__ == "__main__":
    main()
