"""inferd against the limit (raw in-process ONNX Runtime) and against the common tutorial
baseline (a FastAPI app, one request one run: benchmarks/lib/naive_server.py), driven by
`inferd bench`'s own sweep, on two models:

- the demo model (all-MiniLM-L6-v2, 6 layers, hidden 384), one text a request, texts of
  8-100 words (log-uniform);
- a BERT-base-sized encoder (12 layers, hidden 768, 12 heads, random weights), one text a
  request, every text cut to 128 tokens.

Raw ONNX Runtime runs the same texts, tokenized and padded per batch, at batch 1, 4 and 16
(each at least 6 s and 5 runs), right before the servers; its best is the limit. The servers
get closed-loop steps by `inferd bench`'s own code (concurrency 1, 4, 16, 64, each step 8 s or
400 requests, and at least `ROUND_TRIPS` round trips of its clients at raw ONNX Runtime's best
rate: a step's rates leave out its first quarter, and a step of a few round trips counts
whichever batches happen to end inside it; BERT-base at 64 takes about 6 s a request here),
interleaved: at each concurrency, 3 rounds of one step on each server back to
back, the order turned each round, so that the two steps of a round share the machine's speed
of that minute (it drifts by tens of percent between minutes); the ratio is the median of the
rounds' ratios, the figures those of each server's median round. The client shares the
machine with them. Then a lone text, in 5 rounds of raw ONNX Runtime (100 calls at batch 1),
inferd and the naive server (100 requests each at concurrency 1 from `inferd bench`'s client,
then 1.5 s each from a lean raw-asyncio client) in turn, so that each server's p50 is set
beside a raw call of the same minute. Written: a table per model,
the knee of each server, the lone-text line, and the plots (benchmarks/results/<model>/).

    python benchmarks/serving_bench.py            # writes the "serving" section of RESULTS.md
    python benchmarks/serving_bench.py --quick
    python benchmarks/serving_bench.py soak --minutes 5   # a part; --help lists them
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import yaml
from rich.console import Console
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, Server, machine_description, parts_help, publish, run_entry
from inferd.bench.knee import Knee, find_knee
from inferd.bench.launch import free_port
from inferd.bench.load import closed_loop
from inferd.bench.report import write_report
from inferd.bench.steps import STEADY_FROM, Step
from inferd.bench.sweep import SweepSettings, run_sweep
from inferd.bench.workload import Lengths, Workload, build_workload, generate_texts
from inferd.tools.demo import build_demo
from inferd.tools.encoder_graph import build_encoder
from inferd.tools.encoder_shape import EncoderShape, random_weights
from overload_bench import lone_latencies, request_bytes

BATCHES = (1, 4, 16)
MIN_RUNS = 5
STEP_ROUNDS = 3
ROUND_TRIPS = 3
SENDS_PER_CLIENT = 8
"""A step's request cap is at least this many requests a client: refusals count as sends, and
with fewer (the quick run's 100 at 64 clients) a step where a server refuses some ends within
a round trip or two, its steady part holding next to no answers."""
LONE_ROUNDS = 5
LONE_CALLS = 100
LONE_LEAN_S = 1.5
PLOTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Subject:
    key: str
    title: str
    model: str
    lengths: str
    max_tokens: int


SUBJECTS = (
    Subject(
        "minilm",
        "Demo model (all-MiniLM-L6-v2), texts of 8-100 words",
        "minilm",
        "loguniform:8-100",
        256,
    ),
    Subject(
        "bert-base",
        "BERT-base-sized encoder (12 layers, hidden 768, random weights), 128 tokens",
        "bert-base",
        "fixed:120",
        128,
    ),
)


PARTS = {
    "overhead": ("overhead_bench", "what logs and metrics cost: on against off"),
    "soak": ("soak", "memory, throughput and errors over minutes of mixed traffic"),
    "clients": ("client_bench", "what the Python load generator itself costs"),
    "residency": (
        "residency_bench",
        "many models on one box: on-demand loads and evictions under a memory budget",
    ),
    "device": (
        "device_bench",
        "what the serving path delivers in front of a fast device (emulated): served / device",
    ),
    "churn": (
        "churn_bench",
        "what a pinned model keeps while two clients churn on-demand models, limited or not",
    ),
}


def build_repo(root: Path, layers: int = 12, name: str = "bert-base") -> Path:
    """The demo repository with `name`, a BERT-base-sized encoder of `layers` layers (random
    weights) on the demo's tokenizer; with no layers, a model that costs next to nothing
    to run: what the server costs per request where the runtime is fast (a GPU's stand-in)."""
    build_demo(root)
    tokenizer = root / "minilm" / "1" / "tokenizer.json"
    shape = EncoderShape(
        layers=layers,
        hidden=768,
        heads=12,
        intermediate=3072,
        vocab=30522,
        max_positions=512,
        layer_norm_eps=1e-12,
    )
    version = root / name / "1"
    version.mkdir(parents=True)
    onnx.save(build_encoder(random_weights(shape), shape), str(version / "model.onnx"))  # type: ignore[arg-type]
    (version / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    config = yaml.safe_load((root / "minilm" / "config.yaml").read_text())
    config["tokenizer"] = {"max_tokens": 128, "truncate": True}
    (root / name / "config.yaml").write_text(yaml.safe_dump(config))
    for zero_shot in ("sentiment", "topics"):  # they would only cost memory here
        for f in (root / zero_shot).iterdir():
            f.unlink()
        (root / zero_shot).rmdir()
    return root


def raw_best(
    model_file: Path, tokenizer_file: Path, texts: list[str], max_tokens: int, seconds: float
) -> tuple[float, int, RawLone]:
    """(items/s, batch) of the best batch size: texts tokenized and padded per batch; and the
    session with the texts one a call, for the lone-text rounds. ONNX Runtime's default
    threads."""
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.enable_truncation(max_tokens)
    tokenizer.enable_padding()
    best = (0.0, 1)
    lone: RawLone | None = None
    for batch in BATCHES:
        groups = [texts[i : i + batch] for i in range(0, len(texts) - batch + 1, batch)]
        feeds = []
        for group in groups:
            enc = tokenizer.encode_batch(group)
            feeds.append(
                {
                    "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                    "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                }
            )
        session.run(["last_hidden_state"], feeds[0])
        items, start, i = 0, time.perf_counter(), 0
        while time.perf_counter() - start < seconds or i < MIN_RUNS:
            session.run(["last_hidden_state"], feeds[i % len(feeds)])
            items += batch
            i += 1
        rate = items / (time.perf_counter() - start)
        best = max(best, (rate, batch))
        if batch == 1:
            lone = RawLone(session, feeds)
    assert lone is not None  # BATCHES holds 1
    return best[0], best[1], lone


@dataclass
class RawLone:
    """Raw ONNX Runtime on one text a call, the texts in the servers' order."""

    session: ort.InferenceSession
    feeds: list[dict[str, np.ndarray]]

    def median_ms(self, calls: int) -> float:
        took = []
        for i in range(calls):
            began = time.perf_counter()
            self.session.run(["last_hidden_state"], self.feeds[i % len(self.feeds)])
            took.append(time.perf_counter() - began)
        return float(np.median(took)) * 1000


@dataclass(frozen=True)
class Lone:
    """A lone text, rounds interleaved (raw, inferd, naive; the machine's speed drifts by tens
    of percent between minutes, so each round's server p50 is set beside that round's raw
    median): medians over the rounds."""

    raw_ms: float
    inferd_ms: float
    naive_ms: float
    inferd_lean_ms: float
    naive_lean_ms: float
    inferd_over_ms: float
    naive_over_ms: float
    inferd_lean_over_ms: float
    naive_lean_over_ms: float


def lone_rounds(raw: RawLone, urls: dict[str, str], workload: Workload) -> Lone:
    """`LONE_ROUNDS` rounds of: raw ONNX Runtime's median over `LONE_CALLS` calls, then each
    server's p50 over as many requests at concurrency 1 with `inferd bench`'s client
    (aiohttp), and over `LONE_LEAN_S` with the lean one (raw asyncio HTTP/1.1 on uvloop, as
    benchmarks/lib/steady.py drives generation: a fraction of any general client's CPU a request,
    so the p50 is the server's more than the client's)."""
    lean = {  # each server's requests: the texts of the raw calls, in turn
        url: [
            request_bytes(urlparse(url).netloc, body, workload.path)
            for body in workload.bodies[:LONE_CALLS]
        ]
        for url in urls.values()
    }
    rows: list[tuple[float, ...]] = []
    for _ in range(LONE_ROUNDS):
        raw_ms = raw.median_ms(LONE_CALLS)
        p50s = []
        for url in urls.values():
            run = asyncio.run(
                closed_loop(url, workload.path, workload.cycle(), 1, 60.0, LONE_CALLS)
            )
            p50s.append(float(np.median([s.latency_s for s in run.samples])) * 1000)
        for url, payloads in lean.items():
            p50s.append(float(np.median(lone_latencies(url, payloads, LONE_LEAN_S))) * 1000)
        rows.append((raw_ms, *p50s, *(p - raw_ms for p in p50s)))
    medians = [float(np.median(column)) for column in zip(*rows, strict=True)]
    return Lone(*medians)


class Naive:
    def __init__(self, model: Path, tokenizer: Path, max_tokens: int) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "lib" / "naive_server.py"),
                "--model",
                str(model),
                "--tokenizer",
                str(tokenizer),
                "--max-tokens",
                str(max_tokens),
                "--port",
                str(port),
            ],
        )
        for _ in range(600):
            try:
                if httpx.post(self.url + "/embed", json={"texts": ["warm"]}).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the naive server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@dataclass(frozen=True)
class Target:
    url: str
    model: str | None
    """The model whose metrics inferd's steps scrape (None: the naive server has none)."""


def interleaved(
    targets: dict[str, Target],
    workload: Workload,
    settings: SweepSettings,
    console: Console,
    raw_per_s: float,
) -> tuple[dict[str, list[Step]], list[list[float]]]:
    """Each server warmed up, then at each level `STEP_ROUNDS` rounds of one step a server,
    back to back, the order turned each round; a step lasts at least `step_seconds`. Returns
    each server's step of its median round (by requests/s) at each level, and each level's
    ratios of the first server to the second, one a round."""
    once = dataclasses.replace(settings, warmup_s=0)
    for target in targets.values():
        run_sweep(target.url, workload, dataclasses.replace(settings, levels=()), None, console)
    series: dict[str, list[Step]] = {name: [] for name in targets}
    ratios: list[list[float]] = []
    first, second = targets
    for level in settings.levels:
        seconds = step_seconds(settings.duration_s, level, raw_per_s)
        rounds: dict[str, list[Step]] = {name: [] for name in targets}
        for r in range(STEP_ROUNDS):
            order = list(targets) if r % 2 == 0 else list(reversed(targets))
            for name in order:
                target = targets[name]
                (step,) = run_sweep(
                    target.url,
                    workload,
                    dataclasses.replace(
                        once,
                        levels=(level,),
                        duration_s=seconds,
                        max_requests=max(once.max_requests, int(SENDS_PER_CLIENT * level)),
                    ),
                    target.model,
                    console,
                    f"{name} round {r + 1} ",
                )
                rounds[name].append(step)
        for name, steps in rounds.items():
            series[name].append(sorted(steps, key=lambda s: s.requests_per_s)[len(steps) // 2])
        ratios.append(
            [
                a.requests_per_s / b.requests_per_s
                for a, b in zip(rounds[first], rounds[second], strict=True)
            ]
        )
    return series, ratios


def step_seconds(least_s: float, level: float, raw_per_s: float) -> float:
    """A closed-loop step's length at `level` clients: `least_s`, or `ROUND_TRIPS` round trips
    of the clients at the raw limit's rate, over the part of the step its rates count."""
    return max(least_s, ROUND_TRIPS * level / raw_per_s / (1 - STEADY_FROM))


Measured = tuple[dict[str, list[Step]], list[list[float]], dict[str, Knee], float, int, Lone]


def measure(
    subject: Subject, root: Path, settings: SweepSettings, console: Console, seconds: float
) -> Measured:
    version = root / subject.model / "1"
    texts = generate_texts(256, Lengths.parse(subject.lengths), seed=0)
    raw, raw_batch, raw_lone = raw_best(
        version / "model.onnx", version / "tokenizer.json", texts, subject.max_tokens, seconds
    )
    server = Server(root)
    naive: Naive | None = None
    try:
        workload = build_workload(
            server.url,
            "embed",
            subject.model,
            inputs=None,
            lengths=Lengths.parse(subject.lengths),
            count=256,
            batch=1,
            max_new_tokens=0,
            v2_length=0,
            seed=0,
        )
        naive = Naive(version / "model.onnx", version / "tokenizer.json", subject.max_tokens)
        targets = {
            "inferd": Target(server.url, subject.model),
            "naive FastAPI": Target(naive.url, None),
        }
        series, ratios = interleaved(targets, workload, settings, console, raw)
        lone = lone_rounds(raw_lone, {"inferd": server.url, "naive": naive.url}, workload)
    finally:
        server.stop()
        if naive is not None:
            naive.stop()
    knees = {
        name: find_knee([s.requests_per_s for s in steps], [s.p99_ms for s in steps])
        for name, steps in series.items()
    }
    return series, ratios, knees, raw, raw_batch, lone


def table(
    subject: Subject,
    series: dict[str, list[Step]],
    ratios: list[list[float]],
    knees: dict[str, Knee],
    raw: float,
    raw_batch: int,
    lone: Lone,
) -> str:
    inferd, naive = series["inferd"], series["naive FastAPI"]
    rows = [
        f"| {a.level:g} | {a.requests_per_s:.1f} | {a.p50_ms:.0f} | {a.p99_ms:.0f} | "
        f"{b.requests_per_s:.1f} | {b.p50_ms:.0f} | {b.p99_ms:.0f} | "
        f"**{np.median(each):.2f}x** ({', '.join(f'{x:.2f}' for x in each)}) |"
        for a, b, each in zip(inferd, naive, ratios, strict=True)
    ]
    best_inferd = max(s.requests_per_s for s in inferd)
    best_naive = max(s.requests_per_s for s in naive)
    ki, kn = inferd[knees["inferd"].index], naive[knees["naive FastAPI"].index]
    return "\n".join(
        [
            f"### {subject.title}",
            "",
            "| concurrency | inferd req/s | p50 ms | p99 ms | naive req/s | p50 ms | p99 ms "
            "| inferd / naive: median (each round) |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Raw ONNX Runtime (the limit): {raw:.1f} texts/s at batch {raw_batch}. inferd's best: "
            f"{best_inferd:.1f} req/s = **{best_inferd / raw:.0%} of raw**; the naive server's "
            f"best: {best_naive:.1f} req/s = {best_naive / raw:.0%} of raw. Recommended operating "
            f"points (knee): inferd at concurrency {ki.level:g} ({ki.requests_per_s:.1f} req/s, "
            f"p99 {ki.p99_ms:.0f} ms), naive at {kn.level:g} ({kn.requests_per_s:.1f} req/s, p99 "
            f"{kn.p99_ms:.0f} ms).",
            f"A lone text ({LONE_ROUNDS} rounds of raw, inferd and naive in turn, "
            f"{LONE_CALLS} texts each, medians): raw ONNX Runtime at batch 1 (default threads) "
            f"takes {lone.raw_ms:.1f} ms a call; at concurrency 1 inferd answers in "
            f"{lone.inferd_ms:.1f} ms p50 (**{lone.inferd_over_ms:+.1f} ms** on the raw call of "
            f"its round) and the naive server in {lone.naive_ms:.1f} ms "
            f"({lone.naive_over_ms:+.1f} ms), as `inferd bench`'s client (aiohttp) sees them "
            f"(HTTP, JSON and the Python client included); as a lean client sees them (raw "
            f"asyncio HTTP/1.1, {LONE_LEAN_S:g} s a server a round): inferd "
            f"{lone.inferd_lean_ms:.1f} ms (**{lone.inferd_lean_over_ms:+.1f} ms**), naive "
            f"{lone.naive_lean_ms:.1f} ms ({lone.naive_lean_over_ms:+.1f} ms).",
            "",
            f"![throughput](results/{subject.key}/throughput.png) "
            f"![latency](results/{subject.key}/latency.png)",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=parts_help(PARTS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="short steps, RESULTS.md kept")
    args = parser.parse_args()
    settings = SweepSettings(
        levels=(1, 4, 16, 64),
        duration_s=3 if args.quick else 8,
        max_requests=100 if args.quick else 400,
        warmup_s=2,
    )
    console = Console()
    sections = [
        "## Serving: inferd vs raw ONNX Runtime vs a naive FastAPI server",
        "",
        f"Machine: {machine_description()}",
        "",
        "Command: `python benchmarks/serving_bench.py` (closed-loop steps by `inferd bench`'s "
        "own code (aiohttp), concurrency 1/4/16/64, each step 8 s or 400 requests and at least "
        f"{ROUND_TRIPS} round trips of its clients at raw ONNX Runtime's best rate; at each "
        f"concurrency {STEP_ROUNDS} rounds of a step on each server back to back, the order "
        "turned each round; a server's figures are those of its median round, the ratio the "
        "median of the rounds' ratios; one text a request; the Python client shares the 2 "
        "cores with the servers).",
    ]
    with tempfile.TemporaryDirectory(prefix="inferd-serving-") as tmp:
        root = build_repo(Path(tmp) / "repo")
        for subject in SUBJECTS:
            series, ratios, knees, raw, raw_batch, lone = measure(
                subject, root, settings, console, 2 if args.quick else 6
            )
            out = PLOTS / subject.key if not args.quick else Path(tmp) / subject.key
            write_report(out, subject.title, series, knees, {"raw ONNX Runtime": f"{raw:.1f}/s"})
            sections += ["", table(subject, series, ratios, knees, raw, raw_batch, lone)]
    publish("serving", "\n".join(sections), args.quick)


if __name__ == "__main__":
    run_entry(main, PARTS)
