"""Rollouts under load: how fast a bad candidate is rolled back and what clients saw meanwhile,
and what shadow traffic costs the client.

1. A bad candidate: a lookup model whose version 2 fails the 20% of requests that ask rows it
   lacks, rolled out in steps of 5, 25, 50, 100% (10 s windows), under an open loop of
   `--rate` requests/s. Reported: from the rollout's start to its rollback, and the failed
   client requests (against the requests sent meanwhile).
2. Shadow traffic: the demo's /embed with a copy of minilm as version 2, rolled out at 1% with
   `shadow_percent` 10, then 100. Open loop at half the measured capacity, rounds alternating
   between requests naming version 1 (never routed, never shadowed) and requests naming none
   (routed: 99% to version 1, that share of them mirrored to version 2). Reported: client
   p50/p99 of each; then a closed loop at 64 connections (saturation), and how many shadowed
   requests were compared or shed.

3. The judge (`--record`, `--judge`, `--end-to-end N`). `--record` runs a server with three
   pairs of versions served side by side and records, per request, which version answered,
   its latency on the server (`Server-Timing`) and whether it failed: "same" (version 2 a
   byte-identical copy), "slower" (version 2 does 1.6x the work of a matmul model's version
   1: about 1.5x its latency) and "flaky" (version 2 of a lookup table lacks one row in 50:
   2% of requests fail); written to benchmarks/results/rollout-samples.json. `--judge`
   replays rollouts through the pure judge (inferd.engine.rollout.judge) on those samples:
   each window a contiguous stretch of the recording at `--judge-rate` requests/s, the
   candidate's share drawn from version 2's requests of that stretch and the rest from
   version 1's (both arms measured over the same stretch, as on the server), a hold running
   the window on; 50 rollouts per scenario at the defaults and at the shortest window the
   docs allow. `--end-to-end N` runs N real rollouts (identical, slower, flaky in turn) on a
   server under load.

    python benchmarks/rollout_bench.py      # writes the "rollout" section of RESULTS.md
    python benchmarks/rollout_bench.py --quick
    python benchmarks/rollout_bench.py --record --judge --end-to-end 6   # "rollout-judge"
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
import yaml
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from inferd.config.model import RolloutConfig
from inferd.engine.rollout.judge import Outcome, Sample, judge, judge_early
from inferd.tools.demo import build_demo
from overload_bench import closed_loop, open_loop, request_bytes, run_loop
from tests.models import lookup_model, slow_model, write_config
from texts import make_texts

ADMIN_KEY = "rollout-bench"


def admin(server: Server, model: str, action: str | None = None) -> dict[str, object]:
    url = f"{server.url}/v2/repository/models/{model}/rollout"
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    if action is None:
        answer = httpx.get(url, headers=headers, timeout=30)
    else:
        answer = httpx.post(url, json={"action": action}, headers=headers, timeout=120)
    answer.raise_for_status()
    return dict(answer.json())


def start(repo: Path, keys: Path, *more: str) -> Server:
    return Server(repo, "--admin-keys-file", str(keys), *more)


def bad_candidate(tmp: Path, keys: Path, rate: float, seconds: float) -> list[str]:
    repo = tmp / "lookup-repo"
    lookup_model(repo / "lookup" / "1" / "model.onnx", rows=16)
    write_config(
        repo / "lookup",
        {
            "max_batch_size": 16,
            "rollout": {"steps": [5, 25, 50, 100], "analysis_window_s": 10, "min_requests": 20},
        },
    )
    server = start(repo, keys)
    try:
        lookup_model(repo / "lookup" / "2" / "model.onnx", rows=4)
        host, port = server.url.removeprefix("http://").split(":")
        path = "/v2/models/lookup/infer"
        bodies = [
            orjson.dumps(
                {"inputs": [{"name": "idx", "datatype": "INT64", "shape": [1, 1], "data": [i]}]}
            )
            for i in (0, 1, 2, 3, 10)  # one in five asks a row version 2 lacks
        ]
        payloads = [request_bytes(f"{host}:{port}", b, path) for b in bodies]
        admin(server, "lookup", "start")
        tally = run_loop(open_loop(host, int(port), payloads, rate, seconds, 30))
        state = admin(server, "lookup")
    finally:
        server.stop()
    decisions = state["decisions"]
    assert isinstance(decisions, list)
    began = decisions[0]["at"]
    ended = next((d for d in decisions if d["decision"] == "rollback"), None)
    failed = sum(o.status != 200 for o in tally.outcomes)
    took = f"{ended['at'] - began:.2f} s ({ended['reason']})" if ended else "not rolled back"
    return [
        f"| bad candidate (fails 20% of requests), {rate:g} req/s open loop for {seconds:g} s "
        f"| rollback {took} | {failed} of {tally.sent} requests failed "
        f"({failed / max(tally.sent, 1):.2%}); unanswered {tally.sent - len(tally.outcomes)} |"
    ]


def p50_p99(values: list[float]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.array(values) * 1000, [50, 99])
    return float(p50), float(p99)


def shadow_cost(
    tmp: Path, keys: Path, seconds: float, rounds: int, shadow_percent: float
) -> list[str]:
    repo = build_demo(tmp / "demo")
    config_path = repo / "minilm" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["rollout"] = {
        "steps": [1, 100],
        "analysis_window_s": 36000,
        "shadow_percent": shadow_percent,
    }
    config_path.write_text(yaml.safe_dump(config))
    tokenizer = Tokenizer.from_file(str(repo / "minilm" / "1" / "tokenizer.json"))
    tokenizer.no_padding()
    texts = make_texts(tokenizer, 256)
    server = start(repo, keys)
    try:
        shutil.copytree(repo / "minilm" / "1", repo / "minilm" / "2")
        host, port = server.url.removeprefix("http://").split(":")
        named, routed = (
            [
                request_bytes(
                    f"{host}:{port}",
                    orjson.dumps({"texts": [t], "model": "minilm", **extra}),
                    "/embed",
                )
                for t in texts
            ]
            for extra in ({"version": "1"}, {})
        )
        probe = run_loop(closed_loop(host, int(port), named, 32, 10, 30))
        capacity = sum(o.status == 200 for o in probe.outcomes) / 10
        admin(server, "minilm", "start")
        results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
        for _ in range(rounds):
            for name, payloads in (("off", named), ("on", routed)):
                tally = run_loop(open_loop(host, int(port), payloads, capacity / 2, seconds, 30))
                ok = [o.client_s for o in tally.outcomes if o.status == 200]
                results[name].append(p50_p99(ok))
                print(f"{name}: p50/p99 {results[name][-1]}", flush=True)
        before = shadow_counts(server)
        run_loop(closed_loop(host, int(port), routed, 64, 10, 30))
        after = shadow_counts(server)
    finally:
        server.stop()
    off_p99 = statistics.median(p99 for _, p99 in results["off"])
    on_p99 = statistics.median(p99 for _, p99 in results["on"])
    saturated = {k: after.get(k, 0) - before.get(k, 0) for k in ("compared", "shed", "failed")}
    return [
        f"| shadow {shadow_percent:g}% of stable-routed /embed at half capacity "
        f"({capacity / 2:.0f} req/s, "
        f"{rounds} rounds of {seconds:g} s each way) | p50 "
        f"{statistics.median(p for p, _ in results['off']):.1f} -> "
        f"{statistics.median(p for p, _ in results['on']):.1f} ms, p99 {off_p99:.1f} -> "
        f"{on_p99:.1f} ms ({on_p99 / off_p99 - 1:+.0%}) | |",
        f"| the same at saturation (closed loop, 64 connections, 10 s) | shadowed requests: "
        f"{saturated['compared']:.0f} compared, {saturated['shed']:.0f} shed, "
        f"{saturated['failed']:.0f} failed | |",
    ]


def shadow_counts(server: Server) -> dict[str, float]:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    found = re.findall(
        r'inferd_rollout_shadow_requests_total\{model="minilm",outcome="(\w+)"\} ([\d.e+]+)', text
    )
    return {outcome: float(value) for outcome, value in found}


SAMPLES = Path(__file__).resolve().parent / "results" / "rollout-samples.json"
BASE_LAYERS = 2000
"""The matmul models' version 1 (about 2.5 ms a request on one core); "slower" version 2 has
1.6x the layers: with the server's own time per request, about 1.5x the latency."""
SLOWER_WORK = 1.6
FLAKY_ROWS = 50
"""Requests ask rows 0-49 in turn; "flaky" version 2 has 49 rows: 1 in 50 fails (2%)."""


def build_judged(repo: Path, policy: dict[str, object] | None = None) -> Path:
    """The three models `--record` and `--end-to-end` serve (version 2 of each is added by
    `add_judged_candidates`); `policy`: their version policy."""
    more = {"version_policy": policy} if policy else {}
    for name in ("same", "slower"):
        slow_model(repo / name / "1" / "model.onnx", layers=BASE_LAYERS, width=128)
        write_config(repo / name, {"max_batch_size": 1, "runtime": {"intra_op_threads": 1}, **more})
    lookup_model(repo / "flaky" / "1" / "model.onnx", rows=FLAKY_ROWS)
    write_config(
        repo / "flaky",
        {
            "max_batch_size": 1,
            "dynamic_batching": {"max_consecutive_failures": 1_000_000},
            **more,
        },
    )
    return repo


def add_judged_candidates(repo: Path, version: int) -> None:
    for model in ("same", "slower", "flaky"):
        add_judged_candidate(repo, model, version)


def add_judged_candidate(repo: Path, model: str, version: int) -> None:
    """Version `version` of `model`: a byte-identical copy of version 1 ("same"), 1.6x its
    work ("slower"), or one row fewer ("flaky")."""
    if model == "same":
        shutil.copytree(repo / "same" / "1", repo / "same" / str(version))
    elif model == "slower":
        slow_model(
            repo / "slower" / str(version) / "model.onnx",
            layers=int(BASE_LAYERS * SLOWER_WORK),
            width=128,
        )
    else:
        lookup_model(repo / "flaky" / str(version) / "model.onnx", rows=FLAKY_ROWS - 1)


def judged_body(model: str, i: int) -> dict[str, object]:
    if model == "flaky":
        return {
            "inputs": [
                {"name": "idx", "datatype": "INT64", "shape": [1, 1], "data": [i % FLAKY_ROWS]}
            ]
        }
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 128], "data": [0.5] * 128}]}


def server_ms(answer: httpx.Response) -> float:
    timing = answer.headers.get("server-timing", "")
    found = re.search(r"dur=([\d.]+)", timing)
    return float(found.group(1)) if found else float("nan")


def record_samples(tmp: Path, keys: Path, seconds: float, clients: int) -> list[str]:
    """Closed-loop clients, each alternating between versions 1 and 2 of one model at a
    time (so both versions' requests interleave in time); per request: seconds since the
    start, version, server latency (ms), failed."""
    repo = build_judged(tmp / "judged", {"all": True})
    add_judged_candidates(repo, 2)  # both versions of each serve from the start
    server = start(repo, keys, "--repository-poll-s", "3600")
    recorded: dict[str, object] = {"machine": machine_description(), "models": {}}
    rows = []
    try:
        for model in ("same", "slower", "flaky"):
            samples: list[tuple[float, int, float, bool]] = []
            lock = threading.Lock()
            began = time.perf_counter()
            threads = [
                threading.Thread(
                    target=_recording_client,
                    args=(server.url, model, k, clients, began + seconds, began, lock, samples),
                )
                for k in range(clients)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            samples.sort()
            models = recorded["models"]
            assert isinstance(models, dict)
            models[model] = {
                "seconds": seconds,
                "clients": clients,
                "columns": ["at_s", "version", "server_ms", "failed"],
                "samples": samples,
            }
            for version in (1, 2):
                mine = [s for s in samples if s[1] == version]
                ms = np.array([s[2] for s in mine])
                rows.append(
                    f"| recorded: {model} v{version} | {len(mine)} requests in {seconds:g} s, "
                    f"p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms, "
                    f"{sum(s[3] for s in mine) / max(len(mine), 1):.2%} failed |"
                )
                print(rows[-1], flush=True)
    finally:
        server.stop()
    SAMPLES.parent.mkdir(parents=True, exist_ok=True)
    SAMPLES.write_bytes(orjson.dumps(recorded))
    return rows


def replay_rollout(
    samples: list[list[float]],
    config: RolloutConfig,
    rate: float,
    draw: random.Random,
    max_holds: int = 50,
) -> str:
    """One rollout through the judge on a recording: "rolled_back", "promoted" or "held"
    (still holding after `max_holds` more windows at a step)."""
    spread = len(samples)
    per_window = max(1, round(rate * config.analysis_window_s))
    looks = 10  # the server looks every 0.25 s; here ten times a window (early failures)
    position = draw.randrange(spread)

    def stretch(count: int) -> list[list[float]]:
        """The next `count` requests of the recording, both versions (wrapping)."""
        nonlocal position
        chosen = [samples[(position + k) % spread] for k in range(count)]
        position = (position + count) % spread
        return chosen

    for percent in config.steps:
        weight = min(percent, 100 - config.reference_percent) / 100
        stable: list[list[float]] = []
        candidate: list[list[float]] = []
        for _ in range(max_holds + 1):
            for _look in range(looks):
                count = per_window // looks or 1
                for row in stretch(2 * count):  # each version's requests kept by its share
                    if row[1] == 2 and draw.random() < weight:
                        candidate.append(row)
                    elif row[1] == 1 and draw.random() >= weight:
                        stable.append(row)
                early = judge_early(_sample(stable), _sample(candidate), config)
                if early is not None:
                    return "rolled_back"
            verdict = judge(_sample(stable), _sample(candidate), config, None, 1 - weight)
            if verdict.outcome is Outcome.FAIL:
                return "rolled_back"
            if verdict.outcome is Outcome.PASS:
                break
        else:
            return "held"
    return "promoted"


def _sample(rows: list[list[float]]) -> Sample:
    latencies = [r[2] / 1000 for r in rows]
    return Sample(len(rows), sum(int(r[3]) for r in rows), latencies, [0.0] * len(rows))


def judge_replays(runs: int, rate: float, seed: int) -> list[str]:
    recorded = orjson.loads(SAMPLES.read_bytes())
    settings = {
        "defaults (60 s windows, 50 requests)": RolloutConfig(),
        "shortest (10 s windows, 20 requests)": RolloutConfig(
            analysis_window_s=10, min_requests=20
        ),
    }
    wanted = {"same": "promoted", "slower": "rolled_back", "flaky": "rolled_back"}
    rows = []
    for label, config in settings.items():
        for model, goal in wanted.items():
            draw = random.Random(seed)
            samples = recorded["models"][model]["samples"]
            outcomes = [replay_rollout(samples, config, rate, draw) for _ in range(runs)]
            counts = {o: outcomes.count(o) for o in ("promoted", "rolled_back", "held")}
            rows.append(
                f"| {model} | {label} | {counts['rolled_back']} of {runs} rolled back, "
                f"{counts['promoted']} promoted, {counts['held']} still holding | goal: "
                f"{'at most 1 rolled back' if goal == 'promoted' else 'at least 49 rolled back'} |"
            )
            print(rows[-1], flush=True)
    return rows


def end_to_end(
    tmp: Path, keys: Path, rollouts: int, models: tuple[str, ...] = ("same", "slower", "flaky")
) -> list[str]:
    """`rollouts` real rollouts (of `models` in turn: identical, slower, flaky), 10 s
    windows and 20 requests (the shortest the docs allow), steps 10, 50, 100, under four
    closed-loop clients; each candidate is a new version folder (the rollout's defaults
    otherwise: a baseline at the candidate's share)."""
    repo = build_judged(tmp / "e2e")
    for model in ("same", "slower", "flaky"):
        config_path = repo / model / "config.yaml"
        config = yaml.safe_load(config_path.read_text())
        config["rollout"] = {"steps": [10, 50, 100], "analysis_window_s": 10, "min_requests": 20}
        config_path.write_text(yaml.safe_dump(config))
    server = start(repo, keys, "--repository-poll-s", "3600")
    rows = []
    try:
        for n in range(rollouts):
            model = models[n % len(models)]
            add_judged_candidate(repo, model, max(int(v) for v in _folders(repo / model)) + 1)
            stop = threading.Event()
            answer = httpx.post(
                f"{server.url}/v2/repository/models/{model}/rollout",
                json={"action": "start", "to": max(int(v) for v in _folders(repo / model))},
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                timeout=120,
            )
            answer.raise_for_status()
            began = time.monotonic()
            threads = [
                threading.Thread(target=_load_client, args=(server.url, model, k * 7, stop))
                for k in range(4)
            ]
            for thread in threads:
                thread.start()
            state = admin(server, model)
            while state["status"] in ("running", "holding") and time.monotonic() - began < 300:
                time.sleep(0.5)
                state = admin(server, model)
            stop.set()
            for thread in threads:
                thread.join()
            decisions = state["decisions"]
            assert isinstance(decisions, list)
            steps = "; ".join(_step_said(d) for d in decisions[1:])
            rows.append(
                f"| end to end {n + 1}: {model} (version {state['candidate']} beside "
                f"{state['stable']}) | {state['status']} after {time.monotonic() - began:.0f} s "
                f"| {steps} |"
            )
            print(rows[-1], flush=True)
    finally:
        server.stop()
    return rows


def _step_said(decision: dict[str, object]) -> str:
    """A decision in a few words: at what share, what, and the figures of the arms compared
    (the baseline's when it had one)."""
    weight = float(decision["weight"])  # type: ignore[arg-type]
    said = f"{decision['decision']} at {weight:.0%}"
    if decision["decision"] in ("rollback", "hold"):
        return f"{said}: {decision['reason']}"
    candidate = decision["candidate"]
    reference = decision.get("baseline") or decision["stable"]
    arm = "baseline" if decision.get("baseline") else "stable"
    assert isinstance(candidate, dict) and isinstance(reference, dict)
    return (
        f"{said}: candidate p99 {candidate['p99_ms']} ms ({candidate['requests']} requests), "
        f"{arm} p99 {reference['p99_ms']} ms ({reference['requests']} requests)"
    )


def _recording_client(
    url: str,
    model: str,
    k: int,
    clients: int,
    until: float,
    began: float,
    lock: threading.Lock,
    samples: list[tuple[float, int, float, bool]],
) -> None:
    """Requests naming versions 1 and 2 in turn until `until` (perf_counter)."""
    with httpx.Client(base_url=url, timeout=30) as http:
        j = 0
        while time.perf_counter() < until:
            version = 1 + (j + k) % 2
            answer = http.post(
                f"/v2/models/{model}/versions/{version}/infer",
                json=judged_body(model, j * clients + k),
            )
            at = round(time.perf_counter() - began, 4)
            with lock:
                samples.append((at, version, server_ms(answer), answer.status_code != 200))
            j += 1


def _load_client(url: str, model: str, offset: int, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        i = offset
        while not stop.is_set():
            http.post(f"/v2/models/{model}/infer", json=judged_body(model, i))
            i += 1


def _folders(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.is_dir() and p.name.isdigit()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shadow-percent", type=float, action="append")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--record", action="store_true", help="record samples for --judge")
    parser.add_argument("--record-seconds", type=float, default=30)
    parser.add_argument("--judge", action="store_true", help="replay rollouts on the samples")
    parser.add_argument("--judge-runs", type=int, default=50)
    parser.add_argument("--judge-rate", type=float, default=50, help="requests/s replayed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--end-to-end", type=int, default=0, help="real rollouts to run")
    parser.add_argument(
        "--end-to-end-models",
        default="same,slower,flaky",
        help="the models the real rollouts take in turn (comma-separated)",
    )
    args = parser.parse_args()
    if args.record or args.judge or args.end_to_end:
        return judge_main(args)
    percents = args.shadow_percent or [10.0, 100.0]
    if args.quick:
        args.seconds, args.rounds = 6, 1
    with tempfile.TemporaryDirectory(prefix="inferd-rollout-") as name:
        tmp = Path(name)
        keys = tmp / "admin.keys"
        keys.write_text(ADMIN_KEY + "\n")
        rows = bad_candidate(tmp, keys, args.rate, max(args.seconds, 15))
        time.sleep(1)
        for percent in percents:
            rows += shadow_cost(
                tmp / f"shadow-{percent:g}", keys, args.seconds, args.rounds, percent
            )
    command = ("python benchmarks/rollout_bench.py " + " ".join(sys.argv[1:])).strip()
    lines = [
        "## Rollouts: a bad candidate's rollback, and what shadow traffic costs",
        "",
        f"Machine: {machine_description()}.",
        "The client (raw asyncio HTTP/1.1 on uvloop) shares the two cores; latency is counted "
        "from when a request was due.",
        "",
        f"Command: `{command}`",
        "",
        "| scenario | result | client view |",
        "| --- | --- | --- |",
        *rows,
    ]
    publish("rollout", "\n".join(lines), args.quick)
    return 0


def judge_main(args: argparse.Namespace) -> int:
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="inferd-rollout-") as name:
        tmp = Path(name)
        keys = tmp / "admin.keys"
        keys.write_text(ADMIN_KEY + "\n")
        if args.record:
            rows += record_samples(tmp, keys, args.record_seconds, clients=2)
        if args.judge:
            rows += judge_replays(args.judge_runs, args.judge_rate, args.seed)
        if args.end_to_end:
            models = tuple(m for m in args.end_to_end_models.split(",") if m)
            rows += end_to_end(tmp, keys, args.end_to_end, models)
    command = ("python benchmarks/rollout_bench.py " + " ".join(sys.argv[1:])).strip()
    lines = [
        "### Rollouts: the judge on samples recorded from the server, and end to end",
        "",
        f"Machine: {machine_description()}.",
        "Recorded samples: benchmarks/results/rollout-samples.json (server latency from "
        "`Server-Timing`; queue time is not in it, so the queue test is not exercised here). "
        f"Replays: {args.judge_runs} rollouts a row at {args.judge_rate:g} requests/s, steps "
        "1, 5, 25, 50, 100 (the last keeping 5% on the stable version), a hold running on "
        "for at most 50 more windows.",
        "",
        f"Command: `{command}`",
        "",
        "| what | setting | outcome | |",
        "| --- | --- | --- | --- |",
        *rows,
    ]
    publish("rollout-judge", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
