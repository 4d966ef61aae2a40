"""Overload: goodput past the knee, closed and open loop, on the demo's /predict (or `--path`).

First the knee: closed loop at a few concurrencies (`--knee`), its best goodput (successes a
second) the server's capacity. Then, for each step:
- closed loop (`--closed`): that many clients, each sending its next request as soon as the
  last is answered, whatever the answer (as retry loops that ignore `Retry-After` do);
- open loop (`--open`): Poisson arrivals at that factor of the capacity, each sent on an idle
  keep-alive connection or a new one, latency counted from when it was due (so a slow server
  cannot hide behind a slow client).

For each step: goodput (successes answered while the load was offered) and its ratio to the
best at the knee, refusals, the p99 of successes as the server saw them (its `Server-Timing`:
from parsing the request's first byte to the start of the answer, and that less the batch's
`run`) and as the client did, the p99 of refusals, and the requests lost (no answer within
`--grace` seconds of the end, or their connection failed). `--server-cpus 0 --client-cpus 1`
pins the server and the load generator to cores of their own; `--unbounded` measures the
same server without a queue-time bound in the same run. `--unique` makes every request's text
unique (a counter appended), so no answer comes from the response cache. The client is a raw
asyncio HTTP/1.1 client (uvloop).

    python benchmarks/overload_bench.py --server-cpus 0 --client-cpus 1 --unique --unbounded
    python benchmarks/overload_bench.py --baseline 83e86e5   # an older commit first, alike
    python benchmarks/overload_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import orjson
import yaml
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    RESULTS,
    Server,
    machine_description,
    parts_help,
    publish,
    run_entry,
    worktree,
)
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
    run_s: float | None = None
    """Of `server_s`, the time its batches ran (`Server-Timing`'s `run`)."""
    hold_s: float = 0.0
    """Of `server_s`, the time a paced refusal was held back (`Server-Timing`'s `hold`)."""
    done_at: float = 0.0
    """When the answer came (`time.perf_counter`)."""


def server_timings(head: bytes) -> dict[bytes, float]:
    """`Server-Timing`'s durations (seconds) by name, from a lower-cased response head."""
    at = head.find(b"server-timing: ")
    if at < 0:
        return {}
    stop = head.find(b"\r\n", at)
    found: dict[bytes, float] = {}
    for part in head[at + 15 : stop if stop >= 0 else None].split(b","):
        name, _, dur = part.strip().partition(b";dur=")
        if dur:
            found[name] = float(dur) / 1000
    return found


class Payloads:
    """The requests sent: the i-th is body i (cycled), its text made unique when `unique`;
    `headers`: more header lines (each ending in CRLF), e.g. an API key's."""

    def __init__(
        self, host: str, bodies: list[list[str]], path: str, unique: bool, headers: bytes = b""
    ) -> None:
        self._host = host
        self._texts = bodies
        self._path = path
        self._unique = unique
        self._headers = headers
        self._fixed = [
            request_bytes(host, orjson.dumps({"texts": t}), path, headers) for t in bodies
        ]

    def __getitem__(self, i: int) -> bytes:
        if not self._unique:
            return self._fixed[i % len(self._fixed)]
        texts = [f"{t} (request {i})" for t in self._texts[i % len(self._texts)]]
        return request_bytes(self._host, orjson.dumps({"texts": texts}), self._path, self._headers)

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
    offered: tuple[float, float] = (0.0, 0.0)
    """When the load began and ended (`time.perf_counter`; the grace after it left out)."""

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
    "fairness": (
        "fairness_bench",
        "one API key floods, another sends steadily: what the steady one gets, alone and not",
    ),
}


def request_bytes(host: str, body: bytes, path: str = PATH, headers: bytes = b"") -> bytes:
    return (
        (
            f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
        ).encode()
        + headers
        + b"\r\n"
        + body
    )


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
            timings = server_timings(head)
            if self.due is not None:
                client_s = time.perf_counter() - self.due
                self.tally.end(
                    Outcome(
                        status,
                        client_s,
                        timings.get(b"total"),
                        timings.get(b"run"),
                        timings.get(b"hold", 0.0),
                        time.perf_counter(),
                    )
                )
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
    host: str,
    port: int,
    payloads: Payloads,
    rate: float,
    seconds: float,
    grace_s: float,
    mark: Callable[[], None] = lambda: None,
) -> Tally:
    """`mark`: called when the load begins and when it ends (before the grace)."""
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
    mark()
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
    await asyncio.sleep(max(0.0, start + seconds - time.perf_counter()))
    mark()
    tally.offered = (start, time.perf_counter())
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
    mark: Callable[[], None] = lambda: None,
) -> Tally:
    """`mark`: called when the load begins and when it ends (before the grace)."""
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
    mark()
    began = time.perf_counter()
    end = began + seconds
    for conn in conns:
        send(conn)
    await asyncio.sleep(seconds)
    mark()
    tally.offered = (began, time.perf_counter())
    end = 0.0  # no more sends: the loop's timer may wake a little before `end`
    await tally.settle(grace_s)
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    return tally


@dataclass(frozen=True)
class CoreUse:
    """Where the server's cores went while a step's load was offered (its grace left out),
    as shares of their time: its event loop's thread, its other threads (the runtime's),
    and idle."""

    loop: float
    threads: float
    idle: float


class CoreWatch:
    """Readings of the server's threads' CPU time and its cores' idle time (`/proc`, Linux)."""

    def __init__(self, pid: int, cpus: set[int] | None) -> None:
        self._pid = pid
        self._cpus = sorted(cpus) if cpus else list(range(os.cpu_count() or 1))
        self._tick = os.sysconf("SC_CLK_TCK")
        self.marks: list[tuple[float, float, float, float]] = []
        """(wall s, the event loop's CPU s, the other threads' CPU s, the cores' idle s)."""

    def mark(self) -> None:
        loop_s = threads_s = 0.0
        with contextlib.suppress(FileNotFoundError):
            for tid in os.listdir(f"/proc/{self._pid}/task"):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    stat = Path(f"/proc/{self._pid}/task/{tid}/stat").read_text()
                    fields = stat[stat.rindex(")") + 2 :].split()
                    cpu_s = (int(fields[11]) + int(fields[12])) / self._tick
                    if int(tid) == self._pid:  # (uvicorn runs the event loop on the main thread)
                        loop_s += cpu_s
                    else:
                        threads_s += cpu_s
        idle_s = 0.0
        for line in Path("/proc/stat").read_text().splitlines():
            name, *values = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in self._cpus:
                idle_s += (int(values[3]) + int(values[4])) / self._tick
        self.marks.append((time.perf_counter(), loop_s, threads_s, idle_s))

    def use(self) -> CoreUse | None:
        """Between the first two marks; None without them."""
        if len(self.marks) < 2:
            return None
        (t0, loop0, threads0, idle0), (t1, loop1, threads1, idle1) = self.marks[:2]
        cores_s = (t1 - t0) * len(self._cpus)
        return CoreUse(
            (loop1 - loop0) / cores_s, (threads1 - threads0) / cores_s, (idle1 - idle0) / cores_s
        )


@dataclass
class Step:
    """One load step: what was offered, what came back, and where the server's cores went."""

    loop: str
    offered: str
    tally: Tally
    cores: CoreUse | None = None


@dataclass
class Scenario:
    knee: list[tuple[int, float]]
    """Goodput (successes a second) at each closed-loop concurrency of the knee's sweep."""
    steps: list[Step]

    @property
    def best(self) -> float:
        return max(goodput for _, goodput in self.knee)


def pin(cpus: set[int] | None) -> None:
    """Runs this process (and what it starts from now on) on `cpus`; None: on every core."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    else:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def run_scenario(
    repo: Path, texts: list[list[str]], args: argparse.Namespace, env: dict[str, str]
) -> Scenario:
    pin(args.server_cpus)
    server = Server(repo, *args.serve_arg, env=env)
    pin(args.client_cpus)
    host, port = server.url.removeprefix("http://").split(":")
    payloads = Payloads(f"{host}:{port}", texts, args.path, args.unique)
    try:
        knee = []
        for connections in args.knee:
            probe = run_loop(closed_loop(host, int(port), payloads, connections, args.knee_s, 30))
            knee.append((connections, goodput(probe)))
            print(f"closed loop {connections}: {knee[-1][1]:.0f} successes/s", flush=True)
        capacity = max(goodput for _, goodput in knee)
        steps = []
        for connections in args.closed:
            print(f"closed loop, {connections} connections", flush=True)
            watch = CoreWatch(server.process.pid, args.server_cpus)
            tally = run_loop(
                closed_loop(
                    host, int(port), payloads, connections, args.seconds, args.grace, watch.mark
                )
            )
            steps.append(Step("closed", f"{connections} clients", tally, watch.use()))
        for factor in args.open:
            rate = capacity * factor
            print(f"open loop at {rate:.0f} req/s ({factor:g}x)", flush=True)
            watch = CoreWatch(server.process.pid, args.server_cpus)
            tally = run_loop(
                open_loop(host, int(port), payloads, rate, args.seconds, args.grace, watch.mark)
            )
            steps.append(Step("open", f"{factor:g}x ({rate:.0f}/s)", tally, watch.use()))
    finally:
        pin(None)
        server.stop()
    return Scenario(knee, steps)


def goodput(tally: Tally) -> float:
    """Successes a second while the load was offered: those answered in the grace after it
    are left out (a deep queue drained then would count its backlog as throughput)."""
    began, ended = tally.offered
    ok = sum(o.status == 200 and began <= o.done_at <= ended for o in tally.outcomes)
    return ok / max(ended - began, 1e-9)


def p99_ms(values: list[float]) -> str:
    return f"{float(np.percentile(values, 99)) * 1000:.1f}" if values else "-"


def curve_row(variant: str, step: Step, seconds: float, best: float) -> str:
    """A step's goodput against the best at the knee, and the p99s that tell its quality."""
    tally = step.tally
    ok = [o for o in tally.outcomes if o.status == 200]
    refused = [o for o in tally.outcomes if o.status == 429]
    other = len(tally.outcomes) - len(ok) - len(refused)
    unanswered = tally.sent - len(tally.outcomes) - tally.lost
    outside = [o.server_s - o.run_s for o in ok if o.server_s is not None and o.run_s]
    decided = [o.server_s - o.hold_s for o in refused if o.server_s is not None]
    paced = sum(o.hold_s > 0 for o in refused)
    rate = goodput(tally)
    return (
        f"| {variant} | {step.loop} | {step.offered} | {rate:.0f} | "
        f"**{rate / best:.2f}** | {len(refused) / seconds:.0f} | "
        f"{100 * paced / max(len(refused), 1):.0f}% | {other} | "
        f"{unanswered + tally.lost} | {p99_ms([o.server_s for o in ok if o.server_s])} | "
        f"{p99_ms(outside)} | {p99_ms([o.client_s for o in ok])} | {p99_ms(decided)} | "
        f"{_percents(step.cores)} |"
    )


def _percents(use: CoreUse | None) -> str:
    if use is None:
        return "-"
    return f"{100 * use.loop:.0f} / {100 * use.threads:.0f} / {100 * use.idle:.0f}"


def plot(scenarios: dict[str, Scenario], out: Path) -> None:
    """Goodput and p99 against the offered load, one line per variant and loop."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, scenario in scenarios.items():
        for loop in ("closed", "open"):
            steps = [s for s in scenario.steps if s.loop == loop]
            if not steps:
                continue
            labels = [s.offered.split(" (")[0] for s in steps]
            rates = [goodput(s.tally) for s in steps]
            p99 = [
                float(
                    np.percentile(
                        [o.client_s for o in s.tally.outcomes if o.status == 200] or [0.0], 99
                    )
                )
                * 1000
                for s in steps
            ]
            left.plot(labels, rates, marker="o", label=f"{name}, {loop} loop")
            right.plot(labels, p99, marker="o", label=f"{name}, {loop} loop")
        left.axhline(scenario.best, linestyle=":", color="grey")
    left.set_title("goodput (successes/s); dotted: best at the knee")
    right.set_title("client p99 of successes (ms)")
    right.set_yscale("log")
    for axis in (left, right):
        axis.set_xlabel("offered load")
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


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


def bound_queue_time(repo: Path, ms: float | None) -> None:
    """Sets `dynamic_batching.max_queue_time_ms` in every model of the demo repository."""
    for config_file in repo.glob("*/config.yaml"):
        config = yaml.safe_load(config_file.read_text())
        config.setdefault("dynamic_batching", {})["max_queue_time_ms"] = ms
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))


def queue_time_words(ms: float | None) -> str:
    return "" if ms is None else f", its models' queue-time bound at {ms:g} ms"


def numbers(text: str) -> list[float]:
    return [float(n) for n in text.split(",") if n]


def cpus(text: str) -> set[int]:
    return {int(n) for n in text.split(",") if n}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=parts_help(PARTS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument(
        "--knee",
        type=numbers,
        default=[16, 32, 64],
        help="closed-loop steps that find the knee (the best goodput); the open loop's unit",
    )
    parser.add_argument("--knee-s", type=float, default=8)
    parser.add_argument(
        "--closed",
        type=numbers,
        default=[64, 256, 1000],
        help="closed-loop clients, each sending again as soon as answered",
    )
    parser.add_argument(
        "--open",
        type=numbers,
        default=[2, 4, 10],
        help="open-loop rates, as factors of the best goodput at the knee",
    )
    parser.add_argument("--server-cpus", type=cpus, help="the server's cores (taskset), e.g. 0")
    parser.add_argument("--client-cpus", type=cpus, help="the load generator's cores, e.g. 1")
    parser.add_argument("--grace", type=float, default=30)
    parser.add_argument("--baseline", help="a git ref to measure first, the same way")
    parser.add_argument(
        "--unbounded",
        action="store_true",
        help="also measure the same server "
        "with no queue-time bound (max_queue_time_ms: null), in the same run",
    )
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
    args.knee = [int(n) for n in args.knee]
    args.closed = [int(n) for n in args.closed]
    if args.quick:
        args.seconds, args.knee_s = 5, 4
    scenarios: dict[str, Scenario] = {}
    with tempfile.TemporaryDirectory(prefix="inferd-overload-") as tmp:
        demo = build_demo(Path(tmp) / "demo")
        tokenizer = Tokenizer.from_file(str(demo / "minilm" / "1" / "tokenizer.json"))
        tokenizer.no_padding()
        bodies = [[t] for t in make_texts(tokenizer, 256)]
        runs: list[tuple[str, str | None, float | None]] = []
        if args.baseline:
            runs.append((args.baseline, args.baseline, args.queue_time_ms))
        runs.append(("inferd", None, args.queue_time_ms))
        if args.unbounded:
            runs.append(("inferd, no queue-time bound", None, -1.0))
        for name, ref, bound_ms in runs:
            repo = Path(tmp) / f"repo-{len(scenarios)}"
            shutil.copytree(demo, repo)
            if bound_ms is not None:
                bound_queue_time(repo, None if bound_ms < 0 else bound_ms)
            print(name, flush=True)
            if ref is None:
                scenarios[name] = run_scenario(repo, bodies, args, {})
                continue
            with worktree(ref, Path(tmp) / "baseline") as tree:
                scenarios[name] = run_scenario(
                    repo, bodies, args, {"PYTHONPATH": str(tree / "src")}
                )
    command = ("python benchmarks/overload_bench.py " + " ".join(sys.argv[1:])).strip()
    pinned = (
        f"the server on core(s) {sorted(args.server_cpus)}, the load generator on "
        f"{sorted(args.client_cpus)} (`sched_setaffinity`)"
        if args.server_cpus and args.client_cpus
        else "the load generator on the same cores as the server"
    )
    knees = "; ".join(
        f"{name}: " + ", ".join(f"{c} clients {g:.0f}/s" for c, g in s.knee)
        for name, s in scenarios.items()
    )
    plot_file = RESULTS.parent / "results" / "overload.png"
    if not args.quick:
        plot(scenarios, plot_file)
    lines = [
        "## Overload: goodput past the knee, closed and open loop",
        "",
        f"Machine: {machine_description()}; {pinned}.",
        f"Server: `inferd serve` on the demo repository, its default configuration"
        f"{' plus ' + ' '.join(args.serve_arg) if args.serve_arg else ''}"
        f"{queue_time_words(args.queue_time_ms)}; `POST {args.path}`, "
        "one English text of 8-128 tokens per request"
        f"{' (each unique: a counter appended)' if args.unique else ''}, no model named, no "
        f"deadline. The knee: closed loop for {args.knee_s:g} s at each of "
        f"{', '.join(map(str, args.knee))} clients ({knees}); its best is each variant's "
        f"capacity. Closed loop: each client sends again as soon as it is answered, whatever "
        f"the answer (it ignores `Retry-After`). Open loop: Poisson arrivals at a factor of "
        f"the capacity. {args.seconds:g} s a step. Goodput: successes a second while the load "
        "was offered (those answered in the grace after it left out: a deep queue drains "
        "then); **ratio**: "
        "goodput over the best at the knee. Server p99: `Server-Timing`'s total; outside the "
        "run: total less `run` (the wait for the batch, parsing, answering); client: from "
        "when the request was due. Paced: the 429s held back because their connection came "
        "back before its last `Retry-After` was over; 429 server p99: `Server-Timing`'s "
        "total less that hold (the time to decide and answer). Lost: sent "
        f"and not answered within {args.grace:g} s of the end, or its connection failed. "
        "Server cores: shares of the time of the server's cores while the load was offered "
        "(the grace after it left out), from `/proc`: CPU of the event loop's thread, CPU of "
        "the server's other threads (the runtime's), idle. "
        "The client is raw asyncio HTTP/1.1 on uvloop.",
        "",
        f"Command: `{command}`",
        "",
        "| server | loop | offered | goodput /s | ratio | 429 /s | paced | other | lost "
        "| 200 server p99 ms | 200 outside the run p99 ms | 200 client p99 ms "
        "| 429 server p99 ms | server cores % (event loop / other threads / idle) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for name, scenario in scenarios.items():
        lines += [curve_row(name, step, args.seconds, scenario.best) for step in scenario.steps]
    if not args.quick:
        lines += ["", f"![goodput and p99 against the offered load](results/{plot_file.name})"]
    publish("overload", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    run_entry(main, PARTS)
