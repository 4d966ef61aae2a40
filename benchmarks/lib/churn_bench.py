"""Clients churning on-demand models beside a pinned one: what the pinned model keeps of its
throughput and p99 while two clients (two API keys) name six on-demand models in turn, with
the per-client limit on on-demand loads off and at its defaults.

The models are the demo's `minilm` (an 86 MB file: its load, about half a second of a core, is
what a churning client makes the server pay): `pinned`, and six on-demand copies, `od0`..`od5`,
with room for three of them (`--max-loaded-versions 4`). Four closed-loop clients send `/embed`
of one short text to `pinned`; each churning client sends `/embed` to `od0`, `od1`, ... in
turn, closed loop, and on a 429 goes on at once to the next model (`at once`) or first waits
its `Retry-After` (`Retry-After`). Each run starts a fresh server; the churning clients start
before the clock, so that it sees churn going on, and the runs alone come first and last.

    python benchmarks/serving_bench.py churn          # its section of RESULTS.md
    python benchmarks/serving_bench.py churn --quick
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from inferd.tools.demo import build_demo

ON_DEMAND = [f"od{i}" for i in range(6)]
PINNED_CLIENTS = 4
KEYS = {"steady": "steady-key", "churn-a": "churn-a-key", "churn-b": "churn-b-key"}


@dataclass
class Run:
    name: str
    pinned_ms: list[float] = field(default_factory=list)
    pinned_failed: int = 0
    churn_ok: int = 0
    churn_refused: int = 0
    churn_other: int = 0
    loads: float = 0.0


def build_repo(root: Path) -> Path:
    demo = build_demo(root / "demo")
    repo = root / "repo"
    config = yaml.safe_load((demo / "minilm" / "config.yaml").read_text())
    config.pop("default", None)
    config.pop("response_cache", None)
    for name in ["pinned", *ON_DEMAND]:
        version = repo / name / "1"
        version.mkdir(parents=True)
        for item in (demo / "minilm" / "1").iterdir():
            (version / item.name).symlink_to(item)
        own = dict(config, residency="on_demand" if name != "pinned" else "pinned")
        (repo / name / "config.yaml").write_text(yaml.safe_dump(own))
    return repo


def loads_total(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("inferd_model_loads_on_demand_total{")
    )


def drive(
    server: Server, run: Run, churners: int, honour: bool, seconds: float, warmup: float
) -> None:
    """The churning clients start `warmup` seconds before the clock (so that it sees churn
    going on), the pinned model's clients with it."""
    stop = time.monotonic() + (warmup if churners else 0.0) + seconds
    lock = threading.Lock()

    def pinned(index: int) -> None:
        headers = {"Authorization": f"Bearer {KEYS['steady']}"}
        with httpx.Client(base_url=server.url, timeout=60, headers=headers) as http:
            turn = 0
            while time.monotonic() < stop:
                turn += 1
                started = time.perf_counter()
                answer = http.post(
                    "/embed", json={"model": "pinned", "texts": [f"steady {index} {turn}"]}
                )
                took = (time.perf_counter() - started) * 1000
                with lock:
                    if answer.status_code == 200:
                        run.pinned_ms.append(took)
                    else:
                        run.pinned_failed += 1

    def churn(key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, timeout=60, headers=headers) as http:
            turn = 0
            while time.monotonic() < stop:
                model = ON_DEMAND[turn % len(ON_DEMAND)]
                turn += 1
                answer = http.post("/embed", json={"model": model, "texts": ["churn"]})
                with lock:
                    if answer.status_code == 200:
                        run.churn_ok += 1
                    elif answer.status_code == 429:
                        run.churn_refused += 1
                    else:
                        run.churn_other += 1
                if answer.status_code == 429 and honour:
                    wait = float(answer.headers.get("retry-after", "1"))
                    time.sleep(max(0.0, min(wait, stop - time.monotonic())))

    before = loads_total(server.url)
    threads = [threading.Thread(target=pinned, args=(i,)) for i in range(PINNED_CLIENTS)]
    threads += [threading.Thread(target=churn, args=(KEYS[f"churn-{c}"],)) for c in "ab"[:churners]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.loads = loads_total(server.url) - before


def one_run(
    repo: Path,
    keys: Path,
    name: str,
    limit: bool,
    churners: int,
    honour: bool,
    seconds: float,
    warmup: float,
) -> Run:
    args = ["--api-keys-file", str(keys), "--max-loaded-versions", "4"]
    if not limit:
        args += ["--client-loads-per-minute", "0"]
    server = Server(repo, *args)
    try:
        run = Run(name)
        drive(server, run, churners, honour, seconds, warmup)
        return run
    finally:
        server.stop()


def row(run: Run, alone: list[Run], seconds: float) -> str:
    """`alone`: the runs of the pinned model alone, whose mean the ratios are against."""
    rate = len(run.pinned_ms) / seconds
    alone_rate = float(np.mean([len(a.pinned_ms) for a in alone])) / seconds
    p50, p99 = np.percentile(run.pinned_ms, [50, 99]) if run.pinned_ms else (0.0, 0.0)
    alone_p99 = float(np.mean([np.percentile(a.pinned_ms, 99) for a in alone]))
    return (
        f"| {run.name} | {rate:.1f} | {rate / alone_rate:.2f} | {p50:.1f} | {p99:.1f} | "
        f"{p99 / alone_p99:.2f} | {run.pinned_failed} | {run.loads / seconds:.2f} | "
        f"{run.churn_ok} | {run.churn_refused} | {run.churn_other} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=20, help="churn before the clock")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup = 5, 2
    with tempfile.TemporaryDirectory(prefix="inferd-churn-") as tmp:
        repo = build_repo(Path(tmp))
        keys = Path(tmp) / "api.keys"
        keys.write_text("".join(f"{key} name={name}\n" for name, key in KEYS.items()))
        plan = [  # alone first and last: the machine may change meanwhile
            ("pinned alone", True, 0, False),
            ("2 churning, no limit", False, 2, False),
            ("2 churning, limit (defaults), retry at once", True, 2, False),
            ("2 churning, limit (defaults), Retry-After", True, 2, True),
            ("pinned alone, again", True, 0, False),
        ]
        runs = []
        for name, limit, churners, honour in plan:
            run = one_run(repo, keys, name, limit, churners, honour, args.seconds, args.warmup)
            runs.append(run)
            print(row(run, [runs[0]], args.seconds), flush=True)
    alone = [runs[0], runs[-1]]
    command = ("python benchmarks/serving_bench.py churn " + " ".join(sys.argv[1:])).strip()
    load = os.getloadavg()
    lines = [
        "### Clients churning on-demand models beside a pinned one",
        "",
        f"Machine: {machine_description()}; load average at the end {load[0]:.1f} "
        f"(1 min), {load[1]:.1f} (5 min).",
        "The demo's `minilm` as `pinned` and as six on-demand copies with room for three "
        f"(`--max-loaded-versions 4`); {PINNED_CLIENTS} closed-loop clients send `/embed` of "
        "one text to `pinned`; two churning clients (two API keys) send `/embed` to the "
        "on-demand copies in turn, closed loop, on a 429 going on at once or after its "
        f"`Retry-After`. {args.seconds:g} s a run, a fresh server each; the churning clients "
        f"start {args.warmup:g} s before the clock. Ratios against the "
        "mean of the two runs alone. The limit: "
        "`client_loads_per_minute` 6 and `client_load_burst` 3 (the defaults); no limit: "
        "`--client-loads-per-minute 0`.",
        "",
        f"Command: `{command}`",
        "",
        "| run | pinned answers/s | of alone | pinned p50 ms | pinned p99 ms | p99 of alone "
        "| pinned failed | loads/s | churn 200 | churn 429 | churn other |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(row(run, alone, args.seconds) for run in runs),
    ]
    publish("churn", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
