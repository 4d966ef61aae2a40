"""A prefill with the in-place decoder's logits at each row's last token only, against the same
graph with every position's logits (`build_inplace_decoder(last_only=False)`, the graph before
the change): a prompt's time, the memory a long prompt's prefill adds to the process, and a
16-row decode step's time (one token a row: the same work both ways).

Two GPT-2-architecture decoders, random weights, each built both ways from the same weights:
the demo generator's shape (4 layers, hidden 128, vocabulary 4,096) and one with GPT-2's
vocabulary (4 layers, hidden 256, vocabulary 50,257). Each graph runs in its own process (two
ONNX Runtime thread pools in one process take turns badly on two cores), the two in turn over
the rounds; medians of the rounds. A prefill is one prompt through the KV store that serves
it, asking for the ranked candidates as the scheduler does; the memory is what the process's
resident set grew by in a prefill of the longest prompt (ONNX Runtime's arena keeps what a run
took).

    python benchmarks/generate_bench.py prefill  # an experiment: printed, not in RESULTS.md
    python benchmarks/generate_bench.py prefill --quick
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import machine_description, median_of

ROWS = 16
DECODE_AT = 100


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    heads: int
    hidden: int
    vocab: int
    context: int
    prompts: tuple[int, ...]


SHAPES = (
    Shape("demo shape: 4 layers, hidden 128, vocabulary 4,096", 4, 4, 128, 4096, 256, (32, 128)),
    Shape(
        "GPT-2's vocabulary: 4 layers, hidden 256, vocabulary 50,257",
        4,
        4,
        256,
        50257,
        1024,
        (32, 256, 1024),
    ),
)


def random_gpt2(shape: Shape, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """A GPT-2 state dict (`transformer.*`, Conv1D weights [in, out]) and its config."""
    rng = np.random.default_rng(seed)
    h = shape.hidden

    def normal(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    weights = {
        "transformer.wte.weight": normal(shape.vocab, h),
        "transformer.wpe.weight": normal(shape.context, h),
        "transformer.ln_f.weight": np.ones(h, np.float32),
        "transformer.ln_f.bias": np.zeros(h, np.float32),
    }
    for i in range(shape.layers):
        p = f"transformer.h.{i}"
        for norm in ("ln_1", "ln_2"):
            weights[f"{p}.{norm}.weight"] = np.ones(h, np.float32)
            weights[f"{p}.{norm}.bias"] = np.zeros(h, np.float32)
        for name, (n_in, n_out) in {
            "attn.c_attn": (h, 3 * h),
            "attn.c_proj": (h, h),
            "mlp.c_fc": (h, 4 * h),
            "mlp.c_proj": (4 * h, h),
        }.items():
            weights[f"{p}.{name}.weight"] = normal(n_in, n_out)
            weights[f"{p}.{name}.bias"] = normal(n_out)
    config: dict[str, object] = {
        "n_layer": shape.layers,
        "n_head": shape.heads,
        "n_embd": h,
        "vocab_size": shape.vocab,
        "n_positions": shape.context,
    }
    return weights, config


def build(shape: Shape, folder: Path) -> dict[str, Path]:
    """Both graphs from the same weights, with the ranked candidates the export adds."""
    import onnx

    from inferd.prep.inplace_decoder import build_inplace_decoder
    from inferd.prep.ranked_logits import add_ranked_logits

    weights, config = random_gpt2(shape)
    paths = {}
    for way, last_only in (("last token", True), ("every position", False)):
        model = build_inplace_decoder(weights, config, last_only=last_only)
        add_ranked_logits(model)
        path = folder / f"{'last' if last_only else 'every'}.onnx"
        onnx.save(model, str(path))
        paths[way] = path
    return paths


def resident_mb() -> float:
    """This process's resident memory now (ONNX Runtime's arena keeps what a run took)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def worker(path: Path, context: int, prompts: list[int], repeats: int) -> dict[str, object]:
    """In its own process: each prompt's median prefill (ms), the peak-memory growth of the
    longest prompt's prefill (MB), and the median 16-row decode step (ms)."""
    from inferd.config.model import GenerationConfig, RuntimeOptions
    from inferd.generation.decoder import DecoderShape
    from inferd.generation.kv_layout import kv_store
    from inferd.runtime.onnx_session import OnnxSession

    session = OnnxSession(path, RuntimeOptions(allow_spinning=True))
    shape = DecoderShape.of(session.inputs, session.outputs)
    config = GenerationConfig(
        context_length=context, max_running=ROWS, max_kv_tokens=ROWS * context
    )
    store = kv_store(shape, config)
    rng = np.random.default_rng(1)

    def prefill(length: int) -> float:
        store.clear()
        prompt = [[int(t) for t in rng.integers(1, 1000, length)]]
        step = store.prefill(prompt, [0], 0)
        started = time.perf_counter()
        out = session.run(step.feeds, shape.ranked_names, step.into)
        took = time.perf_counter() - started
        store.take_prefill(step, out)
        return took

    prefill(min(prompts))  # warm-up: the arena and the binding of the buffers
    before = resident_mb()
    prefill(max(prompts))
    grown_mb = resident_mb() - before
    prefill_ms = {
        str(n): float(np.median([prefill(n) for _ in range(repeats)])) * 1000 for n in prompts
    }
    store.clear()
    step = store.prefill([[5] * DECODE_AT] * ROWS, list(range(ROWS)), 0)
    store.take_prefill(step, session.run(step.feeds, shape.ranked_names, step.into))
    step = store.decode(np.full(ROWS, 7), np.full(ROWS, DECODE_AT))
    names = shape.ranked_names
    times = []
    for _ in range(repeats * 4):
        started = time.perf_counter()
        session.run(step.feeds, names, step.into)
        times.append(time.perf_counter() - started)
    return {
        "prefill_ms": prefill_ms,
        "grown_mb": grown_mb,
        "decode_ms": float(np.median(times)) * 1000,
        "last_only": shape.last_only,
    }


def run_worker(path: Path, shape: Shape, repeats: int) -> dict[str, object]:
    command = [
        sys.executable,
        __file__,
        "--worker",
        str(path),
        "--context",
        str(shape.context),
        "--prompts",
        ",".join(str(n) for n in shape.prompts),
        "--repeats",
        str(repeats),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(shape: Shape, rounds: list[dict[str, dict[str, object]]]) -> str:
    ways = list(rounds[0])

    def med(way: str, read: object) -> float:
        return median_of([read(r[way]) for r in rounds])  # type: ignore[operator]

    lines = [
        f"#### {shape.name}",
        "",
        f"{len(rounds)} rounds; a prefill is one prompt, the decode step {ROWS} rows at "
        f"position {DECODE_AT}.",
        "",
        "| logits | "
        + " | ".join(f"prefill of {n} tokens, ms" for n in shape.prompts)
        + f" | memory a {max(shape.prompts)}-token prefill adds, MB | decode step ms |",
        "|---|" + "---|" * (len(shape.prompts) + 2),
    ]
    for way in ways:
        cells = [f"{med(way, lambda r, n=n: r['prefill_ms'][str(n)]):.2f}" for n in shape.prompts]
        grown = med(way, lambda r: r["grown_mb"])
        decode = med(way, lambda r: r["decode_ms"])
        lines.append(f"| {way} | " + " | ".join(cells) + f" | {grown:.0f} | {decode:.3f} |")
    last, every = ways

    def prefill(way: str, n: int) -> float:
        return med(way, lambda r: r["prefill_ms"][str(n)])

    ratios = ", ".join(
        f"{n} tokens {prefill(last, n) / prefill(every, n):.2f}x" for n in shape.prompts
    )
    lines += ["", f"Prefill time, last token / every position: {ratios}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two short rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--context", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prompts", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=20, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        prompts = [int(n) for n in args.prompts.split(",")]
        print(json.dumps(worker(args.worker, args.context, prompts, args.repeats)))
        return
    rounds, repeats = (2, 5) if args.quick else (args.rounds, 20)
    command = ("python benchmarks/generate_bench.py prefill " + " ".join(sys.argv[1:])).strip()
    sections = [
        "### A prefill with the last token's logits only",
        "",
        f"Machine: {machine_description()}",
        "",
        f"Command: `{command}` (GPT-2 architecture, random weights, in-place KV cache, the "
        "ranked candidates asked for as the scheduler asks; each graph in its own process, "
        "the two in turn each round; medians of the rounds).",
    ]
    with tempfile.TemporaryDirectory(prefix="inferd-prefill-") as tmp:
        for shape in SHAPES:
            folder = Path(tmp) / str(shape.vocab)
            folder.mkdir()
            paths = build(shape, folder)
            results = []
            for k in range(rounds):
                order = list(paths.items()) if k % 2 == 0 else list(reversed(paths.items()))
                measured = {way: run_worker(path, shape, repeats) for way, path in order}
                if [measured[way]["last_only"] for way in paths] != [True, False]:
                    raise RuntimeError(f"the graphs' logits are not as built: {measured}")
                results.append({way: measured[way] for way in paths})
                print(shape.vocab, k, results[-1], flush=True)
            sections += ["", report(shape, results)]
    print("\n".join(sections))


if __name__ == "__main__":  # the worker: `run_worker` runs this file
    main()
