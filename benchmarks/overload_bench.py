"""Overload: the demo's /predict (or `--path /embed`) at 8x its capacity, open and closed loop.

First the capacity is measured (closed loop at 32 connections); then
- open loop: Poisson arrivals at `--factor` x that rate for `--seconds`, each sent on an idle
  keep-alive connection or a new one, latency counted from when it was due (so a slow server
  cannot hide behind a slow client);
- closed loop: `--connections` connections (the factor x the capacity in-flight requests and
  more), each sending its next request as soon as the last is answered.

For each: answers by status, the p50/p99/max of 200s and of 429s as the client saw them and as
the server did (its `Server-Timing` header: from parsing the request's first byte to the start
of the answer), the requests sent but never answered within `--grace` seconds of the end, and
the connection errors: connections the server did not accept (connect failed) and accepted
connections closed before their request's answer. `--unique` makes every request's text unique
(a counter appended), so no answer comes from the response cache.
The client is a raw asyncio HTTP/1.1 client (uvloop), on the same two cores as the server.

    python benchmarks/overload_bench.py            # writes the "overload" section of RESULTS.md
    python benchmarks/overload_bench.py --baseline 83e86e5   # an older commit first, alike
    python benchmarks/overload_bench.py --quick
    python benchmarks/overload_bench.py --path /embed --unique --factor 4 --connections 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import orjson
import yaml
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, parts_help, publish, run_entry, worktree
from inferd.tools.demo import build_demo
from texts import make_texts

PATH = "/predict"
SLOW_S = 0.02
"""Answers that took longer than this in the server are counted apart (a refusal should not)."""


@dataclass
class Outcome:
    status: int
    client_s: float
    server_s: float | None


class Payloads:
    """The requests sent: the i-th is body i (cycled), its text made unique when `unique`."""

    def __init__(self, host: str, bodies: list[list[str]], path: str, unique: bool) -> None:
        self._host = host
        self._texts = bodies
        self._path = path
        self._unique = unique
        self._fixed = [request_bytes(host, orjson.dumps({"texts": t}), path) for t in bodies]

    def __getitem__(self, i: int) -> bytes:
        if not self._unique:
            return self._fixed[i % len(self._fixed)]
        texts = [f"{t} (request {i})" for t in self._texts[i % len(self._texts)]]
        return request_bytes(self._host, orjson.dumps({"texts": texts}), self._path)

    def __len__(self) -> int:
        return 1 << 62 if self._unique else len(self._fixed)


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)
    sent: int = 0
    lost: int = 0
    """Requests whose connection failed or closed before their answer."""
    not_accepted: int = 0
    """Of `lost`: connections that could not be opened (the server did not accept them)."""
    outstanding: int = 0
    quiet: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while no request is outstanding."""

    def begin(self) -> None:
        self.sent += 1
        self.outstanding += 1
        self.quiet.clear()

    def end(self, outcome: Outcome | None) -> None:
        if outcome is None:
            self.lost += 1
        else:
            self.outcomes.append(outcome)
        self.outstanding -= 1
        if self.outstanding == 0:
            self.quiet.set()

    async def settle(self, grace_s: float) -> None:
        """Waits up to `grace_s` for every outstanding answer. (A waiter woken by `quiet`
        may find a request sent meanwhile, as an answer's callback sends the next: it waits
        again, until none is outstanding.)"""
        deadline = time.perf_counter() + grace_s
        while self.outstanding > 0 and (left := deadline - time.perf_counter()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.quiet.wait(), left)


PARTS = {
    "hostile": (
        "hostile_bench",
        "hostile requests (--grpc: messages): the answer, and /health meanwhile",
    ),
}


def request_bytes(host: str, body: bytes, path: str = PATH) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


class Connection(asyncio.Protocol):
    """One keep-alive connection with at most one request outstanding."""

    def __init__(self, tally: Tally, on_idle: object) -> None:
        self.tally = tally
        self.on_idle = on_idle
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.due: float | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, payload: bytes, due: float) -> None:
        """Sends a request counted by the caller (`Tally.begin`)."""
        assert self.transport is not None
        self.due = due
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            length_at = head.find(b"content-length:")
            length = int(head[length_at + 15 : head.find(b"\r\n", length_at + 15)].strip() or 0)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            status = int(head[9:12])
            timing_at = head.find(b"server-timing: total;dur=")
            server_s = None
            if timing_at >= 0:
                stop = head.find(b"\r\n", timing_at)
                server_s = float(head[timing_at + 25 : stop if stop >= 0 else None]) / 1000
            if self.due is not None:
                self.tally.end(Outcome(status, time.perf_counter() - self.due, server_s))
                self.due = None
            if b"connection: close" in head:
                return  # the server closes it; connection_lost follows
            self.on_idle(self)  # type: ignore[operator]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.due is not None:
            self.tally.end(None)
            self.due = None


async def open_loop(
    host: str, port: int, payloads: Payloads, rate: float, seconds: float, grace_s: float
) -> Tally:
    loop = asyncio.get_running_loop()
    tally = Tally()
    idle: deque[Connection] = deque()
    rng = random.Random(7)
    busy: set[Connection] = set()

    def on_idle(conn: Connection) -> None:
        busy.discard(conn)
        idle.append(conn)

    async def send_new(payload: bytes, due: float) -> None:
        try:
            _, conn = await loop.create_connection(lambda: Connection(tally, on_idle), host, port)
        except OSError:
            tally.not_accepted += 1
            tally.end(None)
            return
        busy.add(conn)
        conn.send(payload, due)

    connecting: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    due = start
    i = 0
    while due < start + seconds:
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        payload = payloads[i % len(payloads)]
        i += 1
        while idle and idle[0].closed:
            idle.popleft()
        tally.begin()
        if idle:
            conn = idle.popleft()
            busy.add(conn)
            conn.send(payload, due)
        else:
            task = loop.create_task(send_new(payload, due))
            connecting.add(task)
            task.add_done_callback(connecting.discard)
        due += rng.expovariate(rate)
    await tally.settle(grace_s)
    for conn in [*busy, *idle]:
        if conn.transport is not None:
            conn.transport.close()
    return tally


async def closed_loop(
    host: str,
    port: int,
    payloads: Payloads | list[bytes],
    connections: int,
    seconds: float,
    grace_s: float,
) -> Tally:
    loop = asyncio.get_running_loop()
    tally = Tally()
    end = 0.0
    counter = iter(range(1 << 62))
    conns: list[Connection] = []

    def send(conn: Connection) -> None:
        tally.begin()
        conn.send(payloads[next(counter) % len(payloads)], time.perf_counter())

    def on_idle(conn: Connection) -> None:
        if time.perf_counter() < end:
            send(conn)

    for _ in range(connections):
        _, conn = await loop.create_connection(lambda: Connection(tally, on_idle), host, port)
        conns.append(conn)
    end = time.perf_counter() + seconds
    for conn in conns:
        send(conn)
    await asyncio.sleep(seconds)
    end = 0.0  # no more sends: the loop's timer may wake a little before `end`
    await tally.settle(grace_s)
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    return tally


def percentiles_ms(values: list[float]) -> str:
    if not values:
        return "- | - | -"
    p50, p99 = np.percentile(np.array(values) * 1000, [50, 99])
    return f"{p50:.1f} | {p99:.1f} | {max(values) * 1000:.1f}"


def rows(variant: str, label: str, tally: Tally, seconds: float) -> list[str]:
    answered = len(tally.outcomes)
    unanswered = tally.sent - answered - tally.lost
    lines = []
    for status in sorted({o.status for o in tally.outcomes}):
        chosen = [o for o in tally.outcomes if o.status == status]
        client = [o.client_s for o in chosen]
        server = [o.server_s for o in chosen if o.server_s is not None]
        slow = sum(s > SLOW_S for s in server)
        lines.append(
            f"| {variant} | {label} | {status} | {len(chosen)} | {len(chosen) / seconds:.0f} | "
            f"{slow} | {percentiles_ms(server)} | {percentiles_ms(client)} |"
        )
    lines.append(
        f"| {variant} | {label} | sent {tally.sent}: **unanswered {unanswered}**, connection "
        f"errors {tally.lost} (not accepted {tally.not_accepted}, accepted and closed before "
        f"the answer {tally.lost - tally.not_accepted}) | | | | | | | | | |"
    )
    return lines


@dataclass
class Scenario:
    capacity: float
    rate: float
    opened: Tally
    closed: Tally


def run_scenario(
    repo: Path, texts: list[list[str]], args: argparse.Namespace, env: dict[str, str]
) -> Scenario:
    server = Server(repo, *args.serve_arg, env=env)
    host, port = server.url.removeprefix("http://").split(":")
    payloads = Payloads(f"{host}:{port}", texts, args.path, args.unique)
    try:
        probe = run_loop(closed_loop(host, int(port), payloads, 32, 10, 30))
        capacity = sum(o.status == 200 for o in probe.outcomes) / 10
        rate = capacity * args.factor
        print(f"capacity {capacity:.0f} req/s; open loop at {rate:.0f} req/s", flush=True)
        opened = run_loop(open_loop(host, int(port), payloads, rate, args.seconds, args.grace))
        print(f"closed loop, {args.connections} connections", flush=True)
        closed = run_loop(
            closed_loop(host, int(port), payloads, args.connections, args.seconds, args.grace)
        )
    finally:
        server.stop()
    return Scenario(capacity, rate, opened, closed)


def lone_latencies(url: str, payloads: list[bytes], seconds: float) -> list[float]:
    """Each answer's latency (s) at concurrency 1 from the lean client, `payloads` (built by
    `request_bytes` for `url`) in turn for `seconds`; raises when any request failed."""
    address = urlparse(url)
    tally = run_loop(
        closed_loop(address.hostname or "127.0.0.1", address.port or 80, payloads, 1, seconds, 10.0)
    )
    failed = Counter(o.status for o in tally.outcomes if o.status != 200)
    if tally.lost or failed:
        raise RuntimeError(
            f"{url}: requests failed under the lean client: {tally.lost} lost (no answer), "
            f"answers by status {dict(failed)}"
        )
    return [o.client_s for o in tally.outcomes]


def run_loop(coro: object) -> Tally:
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type,no-any-return]
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(coro)  # type: ignore[arg-type]


def bound_queue_time(repo: Path, ms: float) -> None:
    """Sets `dynamic_batching.max_queue_time_ms` in every model of the demo repository."""
    for config_file in repo.glob("*/config.yaml"):
        config = yaml.safe_load(config_file.read_text())
        config.setdefault("dynamic_batching", {})["max_queue_time_ms"] = ms
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))


def queue_time_words(ms: float | None) -> str:
    return "" if ms is None else f", its models' queue-time bound at {ms:g} ms"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=parts_help(PARTS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--factor", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=1536)
    parser.add_argument("--grace", type=float, default=60)
    parser.add_argument("--baseline", help="a git ref to measure first, the same way")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve-arg", action="append", default=[], help="passed to inferd serve")
    parser.add_argument("--path", default=PATH, help="the route: /predict or /embed")
    parser.add_argument(
        "--unique", action="store_true", help="every request's text unique (no cached answer)"
    )
    parser.add_argument(
        "--queue-time-ms",
        type=float,
        help="the demo models' dynamic_batching.max_queue_time_ms (unset: their configuration's)",
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds = 8
    scenarios: dict[str, Scenario] = {}
    with tempfile.TemporaryDirectory(prefix="inferd-overload-") as tmp:
        repo = build_demo(Path(tmp) / "demo")
        if args.queue_time_ms is not None:
            bound_queue_time(repo, args.queue_time_ms)
        tokenizer = Tokenizer.from_file(str(repo / "minilm" / "1" / "tokenizer.json"))
        tokenizer.no_padding()
        bodies = [[t] for t in make_texts(tokenizer, 256)]
        if args.baseline:
            with worktree(args.baseline, Path(tmp) / "baseline") as tree:
                print(f"baseline {args.baseline}", flush=True)
                env = {"PYTHONPATH": str(tree / "src")}
                scenarios[args.baseline] = run_scenario(repo, bodies, args, env)
        print("inferd", flush=True)
        scenarios["inferd"] = run_scenario(repo, bodies, args, {})
    command = ("python benchmarks/overload_bench.py " + " ".join(sys.argv[1:])).strip()
    capacities = ", ".join(f"{name} {s.capacity:.0f} req/s" for name, s in scenarios.items())
    lines = [
        f"## Overload: {args.factor:g}x the capacity, open and closed loop",
        "",
        f"Machine: {machine_description()}.",
        f"Server: `inferd serve` on the demo repository, its default configuration"
        f"{' plus ' + ' '.join(args.serve_arg) if args.serve_arg else ''}"
        f"{queue_time_words(args.queue_time_ms)}; `POST {args.path}`, "
        "one English text of 8-128 tokens per request"
        f"{' (each unique: a counter appended)' if args.unique else ''}, no model named, no "
        "deadline. Capacity (closed loop, "
        f"32 connections, 10 s): {capacities}. Open loop: Poisson arrivals at {args.factor:g}x "
        f"that for {args.seconds:g} s. Closed loop: {args.connections} connections for "
        f"{args.seconds:g} s, each sending again as soon as answered. Unanswered: sent, and no "
        f"answer within {args.grace:g} s of the end. Server ms: its `Server-Timing`, from "
        "parsing the request's first byte to answering (a version without the header shows "
        "none); client ms: from when the request was due to its answer. The client (raw "
        "asyncio HTTP/1.1 on uvloop) shares the two cores.",
        "",
        f"Command: `{command}`",
        "",
        "| version | loop | status | answers | per s | over 20 ms in the server "
        "| server p50 ms | server p99 ms | server max ms | client p50 ms | client p99 ms "
        "| client max ms |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, scenario in scenarios.items():
        lines += rows(name, "open", scenario.opened, args.seconds)
        lines += rows(name, "closed", scenario.closed, args.seconds)
    publish("overload", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    run_entry(main, PARTS)
