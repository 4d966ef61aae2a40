"""Fairness between clients: one API key floods (closed loop, many clients, each sending
again as soon as answered, ignoring `Retry-After`) while another sends steadily (open loop,
Poisson arrivals at a share of the capacity); what the steady key gets, alone and beside the
flood: its success rate and latency, and what the flood gets.

    python benchmarks/overload_bench.py fairness --server-cpus 0 --client-cpus 1
    python benchmarks/overload_bench.py fairness --quick
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish, worktree
from inferd.tools.demo import build_demo
from overload_bench import (
    Payloads,
    Tally,
    closed_loop,
    cpus,
    goodput,
    open_loop,
    pin,
    run_loop,
)
from texts import make_texts

FLOOD_KEY = "flood-key-0123456789"
STEADY_KEY = "steady-key-0123456789"


def summary(tally: Tally, seconds: float) -> str:
    """Sent, success rate, refusals and the successes' p50/p99 (client ms) and p99 in the
    server (`Server-Timing`'s total)."""
    ok = [o for o in tally.outcomes if o.status == 200]
    refused = sum(o.status == 429 for o in tally.outcomes)
    other = len(tally.outcomes) - len(ok) - refused
    rate = 100 * len(ok) / max(tally.sent, 1)
    nan = float("nan")
    client = [o.client_s for o in ok]
    p50, p99 = np.percentile(client, [50, 99]) * 1000 if client else (nan, nan)
    server = [o.server_s for o in ok if o.server_s is not None]
    server_p99 = float(np.percentile(server, 99)) * 1000 if server else nan
    return (
        f"{tally.sent} | {len(ok) / seconds:.1f} | **{rate:.1f}%** | {refused} | "
        f"{other + tally.lost} | {p50:.0f} | **{p99:.0f}** | {server_p99:.0f} |"
    )


def flooding(host: str, port: int, flood: Payloads, args: argparse.Namespace, out: Any) -> None:
    """The flood, in a process of its own (forked: on the load generator's cores too), so
    that the steady client's latency is not the flood's turn on one event loop; sends its
    summary row's cells."""
    tally = run_loop(closed_loop(host, port, flood, args.flood_clients, args.seconds, args.grace))
    out.send(summary(tally, args.seconds))


def together(
    host: str, port: int, flood: Payloads, steady: Payloads, args: argparse.Namespace, rate: float
) -> tuple[str, Tally]:
    """The flood's summary cells and the steady client's tally, the two running at once."""
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=flooding, args=(host, port, flood, args, send)
    )
    child.start()
    time.sleep(2.0)  # the flood's queue stands before the steady client starts
    steady_tally = run_loop(open_loop(host, port, steady, rate, args.seconds - 2.0, args.grace))
    flooded = receive.recv()
    child.join()
    return flooded, steady_tally


def measure(
    name: str,
    demo: Path,
    keys: Path,
    bodies: list[list[str]],
    args: argparse.Namespace,
    env: dict[str, str],
) -> list[str]:
    """The table's rows for one server: the steady key alone, beside the flood, the flood."""
    pin(args.server_cpus)
    server = Server(demo, "--api-keys-file", str(keys), env=env)
    pin(args.client_cpus)
    host, port = server.url.removeprefix("http://").split(":")
    address = f"{host}:{port}"
    flood = Payloads(address, bodies, args.path, True, bearer(FLOOD_KEY))
    steady = Payloads(address, bodies, args.path, True, bearer(STEADY_KEY))
    try:
        probe = run_loop(closed_loop(host, int(port), steady, 32, 8, args.grace))
        rate = goodput(probe) * args.share
        print(f"{name}: the steady key at {rate:.1f}/s", flush=True)
        alone = run_loop(open_loop(host, int(port), steady, rate, args.seconds, args.grace))
        flooded, beside = together(host, int(port), flood, steady, args, rate)
    finally:
        pin(None)
        server.stop()
    return [
        f"| {name} | steady ({rate:.1f}/s) | alone | {summary(alone, args.seconds)}",
        f"| {name} | steady | beside the flood | {summary(beside, args.seconds - 2)}",
        f"| {name} | flood | beside the steady key | {flooded}",
    ]


def bearer(key: str) -> bytes:
    return b"authorization: Bearer %s\r\n" % key.encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--flood-clients", type=int, default=500)
    parser.add_argument(
        "--share",
        type=float,
        default=0.2,
        help="the steady key's rate, as a share of the capacity (closed loop, 32 clients, one key)",
    )
    parser.add_argument("--server-cpus", type=cpus)
    parser.add_argument("--client-cpus", type=cpus)
    parser.add_argument("--grace", type=float, default=30)
    parser.add_argument("--path", default="/embed")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", help="a git ref to measure first, the same way")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 8
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="inferd-fairness-") as tmp:
        demo = build_demo(Path(tmp) / "demo")
        keys = Path(tmp) / "keys"
        keys.write_text(f"{FLOOD_KEY}\n{STEADY_KEY}\n")  # bare: a baseline reads them too
        tokenizer = Tokenizer.from_file(str(demo / "minilm" / "1" / "tokenizer.json"))
        tokenizer.no_padding()
        bodies = [[t] for t in make_texts(tokenizer, 256)]
        if args.baseline:
            with worktree(args.baseline, Path(tmp) / "baseline") as tree:
                env = {"PYTHONPATH": str(tree / "src")}
                rows += measure(args.baseline, demo, keys, bodies, args, env)
        rows += measure("inferd", demo, keys, bodies, args, {})
        shutil.rmtree(demo, ignore_errors=True)
    command = ("python benchmarks/overload_bench.py fairness " + " ".join(sys.argv[1:])).strip()
    pinned = (
        f"the server on core(s) {sorted(args.server_cpus)}, the load generator on "
        f"{sorted(args.client_cpus)}"
        if args.server_cpus and args.client_cpus
        else "the load generator on the same cores as the server"
    )
    lines = [
        "## Fairness between clients: a flood beside a steady key",
        "",
        f"Machine: {machine_description()}; {pinned}.",
        f"Server: `inferd serve` on the demo repository with two API keys of weight 1; `POST "
        f"{args.path}`, one unique English text a request. Capacity: closed loop, 32 clients, "
        f"8 s, measured for each server. Steady: the key `steady` in an open loop (Poisson) "
        f"at {args.share:g} of it, {args.seconds:g} s alone, then "
        f"{args.seconds - 2:g} s beside the flood: the key `flood` in a closed loop of "
        f"{args.flood_clients} clients that send again as soon as answered (ignoring "
        f"`Retry-After`), started 2 s before, in a process of its own. Latency: the client's, "
        "from when the request was due; server p99: `Server-Timing`'s total.",
        "",
        f"Command: `{command}`",
        "",
        "| server | key | when | sent | successes /s | success rate | 429 | other | p50 ms "
        "| p99 ms | server p99 ms |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
    ]
    publish("fairness", "\n".join(lines), args.quick)
    return 0
