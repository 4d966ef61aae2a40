"""Text benchmark: inferd's /embed on the demo model (all-MiniLM-L6-v2) against raw in-process
ONNX Runtime, with realistic mixed-length single-sentence requests (8-128 tokens).

Raw ONNX Runtime is measured at batch 1, padded to the longest text in arrival order, and
bucketed (texts sorted by length first), at several batch sizes; its best is the limit. inferd
is driven by wrk (one thread, cycling through one-text bodies) at concurrency 1..64, with length
grouping on, then at the top concurrency with grouping off and no padding bound (arrival order,
padded to the longest text, as a naive batcher does). CPU time per sequence of the server process
(tokenization included) is set against raw ONNX Runtime's (tokenization not included), and the
tokenizer's own cost is reported. Padding efficiency (real tokens / padded tokens) comes from the
server's statistics. Medians of --repeats runs.

    python benchmarks/serving_bench.py text  # writes the "text" section of RESULTS.md
    python benchmarks/serving_bench.py text --quick  # a short smoke run, nothing written
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import orjson
import yaml
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    Server,
    machine_description,
    median_of,
    process_cpu_s,
    publish,
    require_wrk,
    run_wrk,
)
from inferd.tools.demo import build_demo
from tests.text_corpus import sentences

MIN_TOKENS, MAX_TOKENS = 8, 128


def make_texts(tokenizer: Tokenizer, count: int, seed: int = 0) -> list[str]:
    """`count` texts whose token counts are log-uniform in [8, 128] (many short, some long)."""
    rng = np.random.default_rng(seed)
    words = " ".join(sentences(400)).split()
    texts = []
    for _ in range(count):
        target = round(math.exp(rng.uniform(math.log(MIN_TOKENS), math.log(MAX_TOKENS))))
        start = int(rng.integers(0, len(words) - 200))
        n = max(1, target // 2)
        text = " ".join(words[start : start + n])
        while len(tokenizer.encode(text).ids) < target and n < 200:
            n += 1
            text = " ".join(words[start : start + n])
        ids = tokenizer.encode(text).ids[1:-1][: target - 2]  # keep exactly `target` with specials
        texts.append(tokenizer.decode(ids))
    return texts


@dataclass(frozen=True)
class RawRow:
    mode: str
    batch: int
    seq_per_s: float
    cpu_ms_per_seq: float
    padding_efficiency: float


def raw_measure(
    session: ort.InferenceSession, encoded: list[list[int]], mode: str, batch: int, seconds: float
) -> RawRow:
    order = list(range(len(encoded)))
    if mode == "bucketed":
        order.sort(key=lambda i: len(encoded[i]))
    batches = [order[i : i + batch] for i in range(0, len(order), batch)]
    feeds = []
    real = padded = 0
    for group in batches:
        longest = max(len(encoded[i]) for i in group)
        ids = np.zeros((len(group), longest), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, i in enumerate(group):
            ids[row, : len(encoded[i])] = encoded[i]
            mask[row, : len(encoded[i])] = 1
        real += int(mask.sum())
        padded += mask.size
        feeds.append({"input_ids": ids, "attention_mask": mask})
    np.random.default_rng(1).shuffle(feeds)  # bucketed batches in no length order
    session.run(["mean_pooled"], feeds[0])
    done = 0
    cpu0, t0 = process_cpu_s(), time.perf_counter()
    while True:  # whole passes over every text, so no length is over-represented
        for feed in feeds:
            session.run(["mean_pooled"], feed)
            done += feed["input_ids"].shape[0]
        if time.perf_counter() - t0 >= seconds:
            break
    elapsed, cpu = time.perf_counter() - t0, process_cpu_s() - cpu0
    return RawRow(mode, batch, done / elapsed, cpu * 1000 / done, real / padded)


def tokenizer_cost_us(tokenizer: Tokenizer, texts: list[str]) -> float:
    tokenizer.encode_batch(texts[:64])
    t0 = time.perf_counter()
    rounds = 0
    while time.perf_counter() - t0 < 1.0:
        for i in range(0, len(texts), 32):
            tokenizer.encode_batch(texts[i : i + 32])
        rounds += 1
    return (time.perf_counter() - t0) * 1e6 / (rounds * len(texts))


def stats(server: Server, model: str = "minilm") -> dict[str, float]:
    body = httpx.get(server.url + f"/v2/models/{model}/versions/1/stats", timeout=5).json()
    (s,) = body["model_stats"]
    return {
        "real": s["padding"]["real_elements"],
        "padded": s["padding"]["padded_elements"],
        "rows": s["inference_count"],
        "batches": s["execution_count"],
    }


@dataclass(frozen=True)
class ServedRow:
    concurrency: int
    grouping: bool
    seq_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_seq: float
    padding_efficiency: float
    mean_batch: float
    errors: int
    reference_seq_per_s: float
    """Raw ORT at its best setting, measured right before and right after this step (mean):
    the same minute's limit, on a machine whose speed drifts from minute to minute."""
    reference_cpu_ms: float


def apply_overrides(config: dict[str, Any], overrides: dict[str, object]) -> dict[str, Any]:
    """Model config overrides by dotted key (dynamic_batching.max_padding_waste=0.1)."""
    for dotted, value in overrides.items():
        *parents, key = dotted.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    return config


def serve_steps(
    repo: Path,
    bodies: list[bytes],
    concurrencies: list[int],
    seconds: float,
    grouping: bool,
    reference: Callable[[], RawRow],
    overrides: dict[str, object] | None = None,
) -> list[ServedRow]:
    config_path = repo / "minilm" / "config.yaml"
    pristine = config_path.with_suffix(".pristine")
    if not pristine.exists():  # every step starts from the demo's own config
        pristine.write_text(config_path.read_text())
    config = yaml.safe_load(pristine.read_text())
    config["dynamic_batching"]["length_grouping"] = grouping
    config_path.write_text(yaml.safe_dump(apply_overrides(config, overrides or {})))
    server = Server(repo)
    rows = []
    try:
        run_wrk(server, "/embed", bodies, 16, 2)  # warm-up
        for c in concurrencies:
            ref_before = reference()
            before = stats(server)
            step = run_wrk(server, "/embed", bodies, c, seconds)
            after = stats(server)
            ref_after = reference()
            padded = after["padded"] - before["padded"]
            batches = after["batches"] - before["batches"]
            rows.append(
                ServedRow(
                    c,
                    grouping,
                    step.requests_per_s,
                    step.p50_ms,
                    step.p99_ms,
                    step.server_cpu_ms_per_request,
                    (after["real"] - before["real"]) / padded if padded else 1.0,
                    (after["rows"] - before["rows"]) / batches if batches else 0.0,
                    step.errors,
                    (ref_before.seq_per_s + ref_after.seq_per_s) / 2,
                    (ref_before.cpu_ms_per_seq + ref_after.cpu_ms_per_seq) / 2,
                )
            )
            print(
                f"  grouping={grouping} c={c}: {step.requests_per_s:.1f} seq/s, "
                f"p50 {step.p50_ms:.1f} ms, cpu {step.server_cpu_ms_per_request:.2f} ms/seq, "
                f"padding eff {rows[-1].padding_efficiency:.2f}, "
                f"batch {rows[-1].mean_batch:.1f}"
            )
    finally:
        server.stop()
    return rows


def median_rows(runs: list[list[RawRow]]) -> list[RawRow]:
    return [
        RawRow(
            rs[0].mode,
            rs[0].batch,
            median_of([r.seq_per_s for r in rs]),
            median_of([r.cpu_ms_per_seq for r in rs]),
            rs[0].padding_efficiency,
        )
        for rs in zip(*runs, strict=True)
    ]


def median_served(runs: list[list[ServedRow]]) -> list[ServedRow]:
    return [
        ServedRow(
            rs[0].concurrency,
            rs[0].grouping,
            median_of([r.seq_per_s for r in rs]),
            median_of([r.p50_ms for r in rs]),
            median_of([r.p99_ms for r in rs]),
            median_of([r.cpu_ms_per_seq for r in rs]),
            median_of([r.padding_efficiency for r in rs]),
            median_of([r.mean_batch for r in rs]),
            sum(r.errors for r in rs),
            median_of([r.reference_seq_per_s for r in rs]),
            median_of([r.reference_cpu_ms for r in rs]),
        )
        for rs in zip(*runs, strict=True)
    ]


def report(
    raw: list[RawRow],
    served: list[ServedRow],
    token_us: float,
    mean_tokens: float,
    command: str,
    repeats: int,
) -> str:
    best = max(raw, key=lambda r: r.seq_per_s)
    lines = [
        "## Text: /embed on the demo model (all-MiniLM-L6-v2) vs raw ONNX Runtime",
        "",
        f"Machine: {machine_description()}.",
        f"Texts: log-uniform {MIN_TOKENS}-{MAX_TOKENS} tokens (mean {mean_tokens:.0f}), one text "
        "per request. ONNX Runtime CPU provider, default threads, in both. Load generator: wrk, "
        f"1 thread, closed loop. Medians of {repeats} runs.",
        "",
        f"Command: `{command}`",
        "",
        "Raw in-process ONNX Runtime (no tokenization, no HTTP):",
        "",
        "| mode | batch | seq/s | CPU ms/seq | padding efficiency |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in raw:
        mark = " (best)" if r is best else ""
        lines.append(
            f"| {r.mode}{mark} | {r.batch} | {r.seq_per_s:.1f} | {r.cpu_ms_per_seq:.2f} | "
            f"{r.padding_efficiency:.0%} |"
        )
    lines += [
        "",
        f"Tokenization (`tokenizers`, batches of 32): {token_us:.0f} µs per text "
        f"({token_us / 1000 / best.cpu_ms_per_seq:.1%} of raw best CPU per sequence).",
        "",
        "inferd `/embed` over HTTP (tokenization, batching, pooling and JSON included):",
        "",
        "| concurrency | length grouping | seq/s | vs raw best | vs raw, same minute | p50 ms | "
        "p99 ms | server CPU ms/seq | efficiency | efficiency, same minute | padding efficiency | "
        "mean batch | errors |",
        "| ---: | --- |" + " ---: |" * 11,
    ]
    for r in served:
        lines.append(
            f"| {r.concurrency} | {'on' if r.grouping else 'off, pad to longest'} | "
            f"{r.seq_per_s:.1f} | "
            f"{r.seq_per_s / best.seq_per_s:.0%} | {r.seq_per_s / r.reference_seq_per_s:.0%} | "
            f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | "
            f"{r.cpu_ms_per_seq:.2f} | {best.cpu_ms_per_seq / r.cpu_ms_per_seq:.0%} | "
            f"{r.reference_cpu_ms / r.cpu_ms_per_seq:.0%} | "
            f"{r.padding_efficiency:.0%} | {r.mean_batch:.1f} | {r.errors} |"
        )
    grouped = [r for r in served if r.grouping]
    top = max(grouped, key=lambda r: r.seq_per_s)
    lines += [
        "",
        f"At saturation with length grouping: {top.seq_per_s:.1f} seq/s = "
        f"{top.seq_per_s / best.seq_per_s:.0%} of raw best ({best.mode}, batch {best.batch}); "
        f"CPU efficiency {best.cpu_ms_per_seq / top.cpu_ms_per_seq:.0%} (raw best CPU per "
        "sequence / server CPU per sequence, tokenization on our side only). Against raw "
        "measured in the same minute (bucketed, the best batch of the sweep, right before and "
        f"after the step): {top.seq_per_s / top.reference_seq_per_s:.0%} of its throughput, "
        f"{top.reference_cpu_ms / top.cpu_ms_per_seq:.0%} CPU efficiency.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--raw-seconds", type=float, default=4)
    parser.add_argument("--load-seconds", type=float, default=10)
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        help="a model config override, e.g. dynamic_batching.max_padding_waste=0.1 (repeatable)",
    )
    args = parser.parse_args()
    require_wrk()
    if args.quick:
        args.repeats, args.raw_seconds, args.load_seconds, args.texts = 1, 1.5, 3, 256
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    overrides = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in args.set)}

    with tempfile.TemporaryDirectory() as tmp:
        repo = build_demo(Path(tmp) / "demo")
        tokenizer = Tokenizer.from_file(str(repo / "minilm" / "1" / "tokenizer.json"))
        tokenizer.no_padding()
        texts = make_texts(tokenizer, args.texts)
        encoded = [e.ids for e in tokenizer.encode_batch(texts)]
        mean_tokens = float(np.mean([len(e) for e in encoded]))
        bodies = [orjson.dumps({"texts": [t], "model": "minilm"}) for t in texts]
        session = ort.InferenceSession(
            str(repo / "minilm" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        plan = [("batch 1", 1)] + [
            (mode, b) for mode in ("pad to max", "bucketed") for b in (4, 8, 16, 32)
        ]
        raw_runs: list[list[RawRow]] = []
        served_runs: list[list[ServedRow]] = []
        token_costs = []
        for run in range(args.repeats):
            rows = []
            for mode, batch in plan:
                kind = "bucketed" if mode == "bucketed" else "arrival"
                row = raw_measure(session, encoded, kind, batch, args.raw_seconds)
                rows.append(
                    RawRow(mode, batch, row.seq_per_s, row.cpu_ms_per_seq, row.padding_efficiency)
                )
            raw_runs.append(rows)
            print(f"run {run + 1}: raw", [(r.mode, r.batch, round(r.seq_per_s, 1)) for r in rows])
            token_costs.append(tokenizer_cost_us(tokenizer, texts))
            top = max(rows, key=lambda r: r.seq_per_s)

            def reference(top: RawRow = top) -> RawRow:
                return raw_measure(session, encoded, "bucketed", top.batch, args.raw_seconds / 2)

            steps = serve_steps(
                repo, bodies, concurrencies, args.load_seconds, True, reference, overrides
            )
            blind = {**overrides, "dynamic_batching.max_padding_waste": 1.0}
            steps += serve_steps(
                repo, bodies, concurrencies[-1:], args.load_seconds, False, reference, blind
            )
            served_runs.append(steps)
        command = ("python benchmarks/serving_bench.py text " + " ".join(sys.argv[1:])).strip()
        text = report(
            median_rows(raw_runs),
            median_served(served_runs),
            median_of(token_costs),
            mean_tokens,
            command,
            args.repeats,
        )
    publish("text", text, args.quick)
    return 0
