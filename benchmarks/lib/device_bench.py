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
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from emulated_device import CALIBRATIONS
from inferd.tools.corpus import docstrings
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


def pin(cpus: set[int]) -> None:
    os.sched_setaffinity(0, cpus)


def measure(
    repo: Path, device: str, corpus: list[str], clients: list[int], seconds: float, processes: int
) -> Result:
    every = set(range(os.cpu_count() or 1))
    server_cpus, client_cpus = ({0}, every - {0}) if len(every) > 1 else (every, every)
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
        load = lambda n, s: embed_load(  # noqa: E731
            server.url, MODEL, corpus, PER_REQUEST, n, s, processes
        )
        load(clients[0], min(3.0, seconds / 3))  # warm: arenas, batch sizes
        best: Result | None = None
        for n in clients:
            before = snapshot(server.url, server.process.pid, MODEL)
            served = load(n, seconds)
            after = snapshot(server.url, server.process.pid, MODEL)
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
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--instances", type=int, default=2, help="the model's instances")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.clients = 4, args.clients[:1]
    corpus = texts()
    with tempfile.TemporaryDirectory(prefix="inferd-device-") as tmp:
        repo = build_repo(Path(tmp), args.instances, args.max_batch)
        results = [
            measure(repo, d, corpus, args.clients, args.seconds, args.processes)
            for d in args.devices
        ]
    command = ("python benchmarks/serving_bench.py device " + " ".join(sys.argv[1:])).strip()
    rows = []
    for r in results:
        device_rate = f"{r.device_rate:.0f}" if r.device_rate else "-"
        ratio = f"{r.served / r.device_rate:.2f}" if r.device_rate else "-"
        rows.append(
            f"| {r.device} | {device_rate} | {r.served:.0f} | {ratio} | {r.cpu_us_per_text:.0f} "
            f"| {r.clients} | {r.failed} |"
        )
    lines = [
        "### In front of a fast device (emulated)",
        "",
        f"Machine: {machine_description()}. The server on core 0, the load generator "
        f"({args.processes} processes of closed-loop httpx clients) on the other.",
        f"A BERT-base-shaped encoder (hidden 768) on the demo's tokenizer; texts of "
        f"{TEXT_CHARS} characters, {PER_REQUEST} a request to `/embed`; "
        f"{args.instances} instances, batches of up to {args.max_batch}; {args.seconds:g} s a "
        "step, the best of the client counts. The device answers a batch after a fixed time a "
        "row, one batch at a time (`h200-fp32`: 9.7 ms a batch of 32, `h200-fp16`: 6.2 ms, "
        "`2x-h200-fp16`: 3.1 ms); `none`: the encoder with no layers on ONNX Runtime, on the "
        "server's core.",
        "",
        f"Command: `{command}`",
        "",
        "| device | device texts/s | served texts/s | served / device | server CPU us a text "
        "| clients | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "Where the time goes (the best step of each device):",
        "",
        *(f"- {r.device}: {r.profile}" for r in results),
    ]
    publish("device", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
