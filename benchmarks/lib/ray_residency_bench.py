"""Many models on Ray: 100 small on-demand models on 2 replicas of `inferd ray serve`, each
with a memory budget that holds 10 of them, 8 clients choosing a model at random (uniform, and
Zipf 1.1); requests routed by Serve's model multiplexing (`--multiplex`, the model named in
`serve_multiplexed_model_id`) against the same requests routed without regard to what each
replica holds (`inferd ray serve` without it: Serve's power of two choices on queue lengths).

For each run: requests, failures, cold requests per 1,000 (a cold request waited for its
model's load: `Server-Timing` `load`), the p99 of the hot and of the cold requests. The models,
the budget's arithmetic and the traffic are those of `serving_bench.py residency`. Ray: a
local one-node cluster with 2 CPUs and Serve's HTTP proxy (HAProxy does not route by model),
two replicas of one CPU each; each run on fresh replicas, after a warm-up that fills them.

    python benchmarks/ray_bench.py residency          # its block of RESULTS.md's Ray section
    python benchmarks/ray_bench.py residency --quick
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from residency_bench import (
    CLIENTS,
    FITS,
    MODELS,
    ON_DEMAND,
    WIDTH,
    percentile,
    small_model,
    tensor_body,
    zipf_chooser,
)
from tests.models import write_config

REPLICAS = 2
MODEL_ID_HEADER = "serve_multiplexed_model_id"


@dataclass
class Run:
    routing: str
    traffic: str
    hot_ms: list[float] = field(default_factory=list)
    cold_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return len(self.hot_ms) + len(self.cold_ms) + len(self.failures)

    def cold_per_1000(self) -> float:
        return 1000 * len(self.cold_ms) / max(self.requests, 1)


def drive(
    url: str, run: Run, choose: Callable[[random.Random], str], named: bool, seconds: float
) -> None:
    """`CLIENTS` closed-loop clients for `seconds`, each request to the model `choose` picks
    (named in the header when `named`); recorded in `run` unless it is None."""
    body = tensor_body(WIDTH)
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=url, timeout=60) as http:
            while time.monotonic() < stop:
                model = choose(rng)
                headers = {"content-type": "application/json"}
                if named:
                    headers[MODEL_ID_HEADER] = model
                started = time.perf_counter()
                try:
                    answer = http.post(f"/v2/models/{model}/infer", content=body, headers=headers)
                except httpx.HTTPError as exc:
                    with lock:
                        run.failures.append(type(exc).__name__)
                    continue
                took = (time.perf_counter() - started) * 1000
                timing = answer.headers.get("server-timing", "")
                with lock:
                    if answer.status_code != 200:
                        run.failures.append(f"{answer.status_code} {answer.text[:120]}")
                    elif "load;dur" in timing:
                        run.cold_ms.append(took)
                    else:
                        run.hot_ms.append(took)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def footprint_mb(repo: Path, names: list[str]) -> float:
    """The median footprint of a model, measured by inferd alone (as serving_bench residency
    measures it) on five of them."""
    server = Server(repo)
    try:
        for name in names[:5]:
            answer = httpx.post(
                f"{server.url}/v2/models/{name}/infer",
                content=tensor_body(WIDTH),
                headers={"content-type": "application/json"},
                timeout=60,
            )
            assert answer.status_code == 200, answer.text
        text = httpx.get(server.url + "/metrics", timeout=10).text
        sizes = [
            float(v) for v in re.findall(r"^inferd_model_resident_bytes\{.*\} (\S+)$", text, re.M)
        ]
        return statistics.median(sizes) / 2**20
    finally:
        server.stop()


def row(runs: list[Run]) -> str:
    def pair(values: list[str]) -> str:
        return " / ".join(values)

    return (
        f"| {runs[0].routing} | {pair([f'{r.requests:,}' for r in runs])} | "
        f"{pair([str(len(r.failures)) for r in runs])} | "
        f"{pair([f'{r.cold_per_1000():.0f}' for r in runs])} | "
        f"{pair([f'{percentile(r.hot_ms, 99):.0f}' for r in runs])} | "
        f"{pair([f'{percentile(r.cold_ms, 99):.0f}' for r in runs])} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=10, help="seconds, not measured")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup = 8, 4
    import ray
    from ray import serve

    from inferd.config.server_settings import ServerSettings
    from inferd.rayserve.deploy import APP_NAME, RayDeployment, deploy
    from inferd.rayserve.local import LocalRay

    names = [f"model{i:03d}" for i in range(MODELS)]
    uniform: Callable[[random.Random], str] = lambda rng: rng.choice(names)  # noqa: E731
    traffics = (("uniform", uniform), ("Zipf 1.1", zipf_chooser(names)))
    routings = (("Serve's model multiplexing (`--multiplex`)", True), ("ignoring residency", False))
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="inferd-ray-many-") as folder:
        root = Path(folder)
        repo = root / "repo"
        for index, name in enumerate(names):
            small_model(repo / name / "1" / "model.onnx", index)
            write_config(repo / name, ON_DEMAND)
        footprint = footprint_mb(repo, names)
        budget_mb = FITS * footprint * 1.05
        print(f"footprint {footprint:.1f} MB, budget {budget_mb:.1f} MB a replica", flush=True)
        cluster = LocalRay(root / "ray", nodes=1, cpus_per_node=REPLICAS, direct_ingress=False)
        saved = dict(os.environ)
        os.environ.update({k: v for k, v in cluster.env.items() if k.startswith("RAY_")})
        try:
            ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
            serve.start(http_options={"host": "127.0.0.1", "port": cluster.http_port})
            url = f"http://127.0.0.1:{cluster.http_port}"
            settings = ServerSettings(
                repository=repo,
                log_level="warning",
                response_cache=False,
                model_memory_budget_mb=round(budget_mb, 1),
                client_loads_per_minute=0,  # (every request comes from Serve's proxy)
            )
            for routing, named in routings:
                for traffic, choose in traffics:
                    deploy(RayDeployment(settings, replicas=REPLICAS, num_cpus=1, multiplex=named))
                    try:
                        drive(url, Run(routing, traffic), choose, named, args.warmup)
                        run = Run(routing, traffic)
                        drive(url, run, choose, named, args.seconds)
                    finally:
                        serve.delete(APP_NAME)  # (the next run starts on fresh replicas)
                    runs.append(run)
                    print(
                        f"{routing}, {traffic}: {run.requests} requests, "
                        f"{len(run.failures)} failed, {run.cold_per_1000():.0f} cold per 1,000, "
                        f"hot p99 {percentile(run.hot_ms, 99):.0f} ms, "
                        f"cold p99 {percentile(run.cold_ms, 99):.0f} ms",
                        flush=True,
                    )
                    for failure in sorted(set(run.failures)):
                        print(f"  failed: {failure}", flush=True)
        finally:
            try:
                serve.shutdown()
                ray.shutdown()
            finally:
                cluster.stop()
                os.environ.clear()
                os.environ.update(saved)
    command = ("python benchmarks/ray_bench.py residency " + " ".join(sys.argv[1:])).strip()
    text = "\n".join(
        [
            f"**{MODELS} on-demand models on {REPLICAS} replicas, each with a budget for {FITS}: "
            f"routed by model or not.** Machine: {machine_description()}. The models and "
            f"traffic of `serving_bench.py residency` ({CLIENTS} closed-loop clients, each "
            "request to a model chosen at random, uniform / Zipf 1.1; a figure for each, in "
            f"that order); each replica `--model-memory-budget-mb {budget_mb:.1f}` ({FITS} "
            f"times the median footprint, {footprint:.1f} MB, plus 5%). A local one-node "
            f"cluster with {REPLICAS} CPUs, Serve's HTTP proxy, {REPLICAS} replicas of one CPU; "
            f"each run on fresh replicas, {args.warmup:g} s of warm-up, then {args.seconds:g} "
            "s measured. Cold: a request that waited for its model's load (`Server-Timing` "
            "`load`); hot: one that did not. Ignoring residency: `inferd ray serve` without "
            "`--multiplex`, requests without the header (Serve picks the shorter queue of two "
            f"replicas). Command: `{command}`",
            "",
            "| routing | requests | failed | cold per 1,000 requests | hot p99 ms | cold p99 ms |",
            "| --- | --- | --- | --- | --- | --- |",
            row(runs[:2]),
            row(runs[2:]),
        ]
    )
    publish("ray-residency", text, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
