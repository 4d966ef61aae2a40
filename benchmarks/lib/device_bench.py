"""inferd in front of a fast device: served texts/s against the device's own rate, with the
device emulated (benchmarks/lib/emulated_device.py: a batch answered after a fixed time a row,
sleeping, one batch at a time), so that what is measured is the serving path itself: HTTP,
JSON bodies, tokenizing, batching, answering.

A BERT-base-shaped encoder (hidden 768) on the demo's tokenizer, texts of 600 characters, 32 a
request to `/embed` (its vectors pooled on the device); the server on one core, the load
generator (closed-loop httpx clients in several processes) on the other. Devices: the H200's
measured BERT-base rates (fp32: batch 32 in 9.7 ms; fp16: 6.2 ms), one twice as fast as its
fp16, and `none`: the encoder with no layers run by ONNX Runtime on the server's core (a device
that costs next to nothing: the server's own ceiling from one core). For each device, the best
of the client counts; the server's CPU per served text, and where a request's time and the
server's CPU go (benchmarks/lib/served_profile.py).

    python benchmarks/serving_bench.py device          # its section of RESULTS.md
    python benchmarks/serving_bench.py device --quick
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from emulated_device import CALIBRATIONS
from inferd.corpus import docstrings
from overload_bench import pin
from served_profile import embed_load, snapshot, where_the_time_goes

MODEL = "bert-base"
TEXT_CHARS = 600
PER_REQUEST = 32


def texts(count: int = 512) -> list[str]:
    found = [t[:TEXT_CHARS] for t in docstrings(count * TEXT_CHARS * 2) if len(t) >= TEXT_CHARS]
    return (found * (count // max(1, len(found)) + 1))[:count]


def build_repo(root: Path, instances: int, max_batch: int) -> Path:
    """A repository of one model: the BERT-base-shaped encoder with no layers, on the demo's
    tokenizer (serving_bench's), its texts cut at 512 tokens."""
    from serving_bench import build_repo as serving_repo

    serving_repo(root, layers=0, name=MODEL)
    for folder in root.iterdir():
        if folder.is_dir() and folder.name != MODEL:
            shutil.rmtree(folder)
    config_file = root / MODEL / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["tokenizer"] = {"max_tokens": 512, "truncate": True}
    config["max_batch_size"] = max_batch
    config["instance_count"] = instances
    config.setdefault("dynamic_batching", {})["max_batch_tokens"] = max_batch * 512
    config_file.write_text(yaml.safe_dump(config))
    return root


@dataclass(frozen=True)
class Result:
    device: str
    device_rate: float | None
    served: float
    clients: int
    cpu_us_per_text: float
    failed: int
    profile: str


def tokenizer_us(repo: Path, corpus: list[str]) -> float:
    """Microseconds a text of the tokenizer alone, as the server calls it (`encode_batch_fast`,
    32 texts a call), on core 0: the share of a text's server CPU no serving path can save."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(repo / MODEL / "1" / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(512)
    every = set(range(os.cpu_count() or 1))
    pin({0})
    try:
        calls, started = 0, time.perf_counter()
        while time.perf_counter() - started < 3.0:
            start = (calls * PER_REQUEST) % (len(corpus) - PER_REQUEST)
            tokenizer.encode_batch_fast(corpus[start : start + PER_REQUEST])
            calls += 1
        return (time.perf_counter() - started) * 1e6 / (calls * PER_REQUEST)
    finally:
        pin(every)


def measure(
    repo: Path,
    device: str,
    corpus: list[str],
    clients: list[int],
    seconds: float,
    processes: int,
    model: str = MODEL,
    per: int = PER_REQUEST,
    pinned: bool = True,
) -> Result:
    """The best of `clients` closed-loop loads of `model` on `device`; `pinned`: the server on
    core 0 and the load generator on the others (else both on every core)."""
    every = set(range(os.cpu_count() or 1))
    server_cpus, client_cpus = (every, every)
    if pinned and len(every) > 1:
        server_cpus, client_cpus = {0}, every - {0}
    entry: tuple[str, ...] = (sys.executable, "-m", "inferd")
    rate = None
    if device != "none":
        row_ms = CALIBRATIONS[device]
        rate = 1000 / row_ms
        script = str(Path(__file__).resolve().parent / "emulated_device.py")
        entry = (sys.executable, script, "--row-ms", str(row_ms))
    pin(server_cpus)
    try:
        server = Server(repo, "--log-level", "warning", entry=entry)
    finally:
        pin(client_cpus)
    try:
        load = lambda n, s: embed_load(server.url, model, corpus, per, n, s, processes)  # noqa: E731
        load(clients[0], min(3.0, seconds / 3))  # warm: arenas, batch sizes
        best: Result | None = None
        for n in clients:
            before = snapshot(server.url, server.process.pid, model)
            served = load(n, seconds)
            after = snapshot(server.url, server.process.pid, model)
            cpu_s = after.loop_cpu_s + after.other_cpu_s - before.loop_cpu_s - before.other_cpu_s
            texts_served = served.vectors_per_s * served.seconds
            result = Result(
                device,
                rate,
                served.vectors_per_s,
                n,
                cpu_s * 1e6 / max(texts_served, 1.0),
                len(served.statuses),
                where_the_time_goes(before, after, served),
            )
            print(
                f"{device}: {n} clients: {served.vectors_per_s:.0f} texts/s, "
                f"{result.cpu_us_per_text:.0f} us CPU a text; {result.profile}",
                flush=True,
            )
            if best is None or result.served > best.served:
                best = result
        assert best is not None
        return best
    finally:
        server.stop()
        pin(every)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--devices",
        nargs="+",
        default=["h200-fp32", "h200-fp16", "2x-h200-fp16", "none"],
        choices=[*CALIBRATIONS, "none"],
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[16])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rounds", type=int, default=3, help="each figure the median of")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument(
        "--instances",
        type=int,
        nargs="+",
        default=[2, 3],
        help="the model's instance counts, each measured in every round (three keep a fast "
        "device fed: one batch runs, one waits on the device, one is formed or answered)",
    )
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.clients, args.rounds = 4, args.clients[:1], 1
    corpus = texts()
    runs: dict[tuple[str, int], list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="inferd-device-") as tmp:
        repos = {n: build_repo(Path(tmp) / f"x{n}", n, args.max_batch) for n in args.instances}
        tokenizing = tokenizer_us(repos[args.instances[0]], corpus)
        for _ in range(args.rounds):  # interleaved: the machine's speed drifts between minutes
            for device in args.devices:
                for n, repo in repos.items():
                    result = measure(
                        repo, device, corpus, args.clients, args.seconds, args.processes
                    )
                    runs.setdefault((device, n), []).append(result)
    command = ("python benchmarks/serving_bench.py device " + " ".join(sys.argv[1:])).strip()
    rows, profiles = [], []
    for (device, n), results in runs.items():
        ordered = sorted(results, key=lambda r: r.served)
        r = ordered[len(ordered) // 2]
        device_rate = f"{r.device_rate:.0f}" if r.device_rate else "-"
        ratio = f"{r.served / r.device_rate:.2f}" if r.device_rate else "-"
        spread = f"{ordered[0].served:.0f}-{ordered[-1].served:.0f}"
        rows.append(
            f"| {device} | {n} | {device_rate} | {r.served:.0f} ({spread}) | {ratio} "
            f"| {r.cpu_us_per_text:.0f} | {sum(x.failed for x in results)} |"
        )
        if n == max(args.instances):
            profiles.append(f"- {device}: {r.profile}")
    lines = [
        "### In front of a fast device (emulated)",
        "",
        f"Machine: {machine_description()}. The server on core 0, the load generator "
        f"({args.processes} processes of closed-loop httpx clients) on the other.",
        f"A BERT-base-shaped encoder (hidden 768) on the demo's tokenizer; texts of "
        f"{TEXT_CHARS} characters, {PER_REQUEST} a request to `/embed`; batches of up to "
        f"{args.max_batch}; {args.seconds:g} s a step at {', '.join(map(str, args.clients))} "
        f"clients (the best), a fresh server each; {args.rounds} interleaved rounds, the "
        "median round shown (and the range). The device answers a batch after a fixed time a "
        "row, one batch at a time (`h200-fp32`: 9.7 ms a batch of 32, `h200-fp16`: 6.2 ms, "
        "`2x-h200-fp16`: 3.1 ms); `none`: the encoder with no layers on ONNX Runtime, on the "
        "server's core.",
        "",
        f"Command: `{command}`",
        "",
        "| device | instances | device texts/s | served texts/s | served / device "
        "| server CPU us a text | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"The tokenizer alone (`encode_batch_fast`, {PER_REQUEST} texts a call, core 0): "
        f"{tokenizing:.0f} us a text.",
        "",
        f"Where the time goes ({max(args.instances)} instances, the median round):",
        "",
        *profiles,
    ]
    publish("device", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
