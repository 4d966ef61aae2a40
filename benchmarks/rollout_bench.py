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

    python benchmarks/rollout_bench.py      # writes the "rollout" section of RESULTS.md
    python benchmarks/rollout_bench.py --quick
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
import yaml
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from inferd.tools.demo import build_demo
from overload_bench import closed_loop, open_loop, request_bytes, run_loop
from tests.models import lookup_model, write_config
from text_bench import make_texts

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


def start(repo: Path, keys: Path) -> Server:
    return Server(repo, "--admin-keys-file", str(keys))


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shadow-percent", type=float, action="append")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
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


if __name__ == "__main__":
    raise SystemExit(main())
