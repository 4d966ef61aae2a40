"""Many models on one box: 100 small on-demand models, a memory budget that holds 10 of them,
8 clients choosing a model at random (uniform, and Zipf-skewed as real traffic is), against the
same traffic where every model fits; then the cold start of the demo's `minilm` and of a 100 MB
model (every request a cold one: two copies under a budget that holds one).

For each run: requests, failures, cold requests (those whose `Server-Timing` has `load`), the
p50/p99 of the hot requests (their model in memory) and of the cold ones, evictions, and the
most the loaded versions held (`inferd_model_resident_bytes` of those resident, sampled every
100 ms) against the budget, and the process's resident memory over what it held with nothing
loaded.

    python benchmarks/serving_bench.py residency          # its section of RESULTS.md
    python benchmarks/serving_bench.py residency --quick
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import yaml
from onnx import TensorProto, helper, numpy_helper, save

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Server, machine_description, publish
from inferd.tools.demo import build_demo
from tests.models import big_model, write_config

MODELS = 100
FITS = 10
CLIENTS = 8
WIDTH = 256
HIDDEN = 2048
"""Each model: x [batch, 256] @ W [256, 2048] (2 MB of weights) -> y."""
ON_DEMAND = {"max_batch_size": 8, "residency": "on_demand", "runtime": {"intra_op_threads": 1}}
UNLIMITED = ("--client-loads-per-minute", "0")
"""The 8 clients stand for many users behind one address: no limit on one client's loads."""


def small_model(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", HIDDEN])
    weight = rng.standard_normal((WIDTH, HIDDEN)).astype(np.float32) / 16
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "small",
        [x],
        [y],
        [numpy_helper.from_array(weight, "w")],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def tensor_body(width: int) -> bytes:
    import orjson

    data = [0.5] * width
    return orjson.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, width], "data": data}]}
    )


@dataclass
class Run:
    name: str
    hot_ms: list[float] = field(default_factory=list)
    cold_ms: list[float] = field(default_factory=list)
    load_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    held_max: float = 0.0
    rss_over_idle_max: float = 0.0
    evictions: float = 0.0


def resident_bytes(url: str) -> tuple[float, float]:
    """What the resident versions hold (their measured footprints), and the evictions."""
    text = httpx.get(url + "/metrics", timeout=10).text
    resident = {
        m: float(v)
        for m, v in re.findall(r'^inferd_model_resident\{model="([^"]+)".*\} (\S+)$', text, re.M)
    }
    footprints = {
        m: float(v)
        for m, v in re.findall(
            r'^inferd_model_resident_bytes\{model="([^"]+)".*\} (\S+)$', text, re.M
        )
    }
    evictions = sum(
        float(v) for v in re.findall(r"^inferd_model_evictions_total\{.*\} (\S+)$", text, re.M)
    )
    return sum(footprints.get(m, 0.0) for m, on in resident.items() if on), evictions


def process_rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) * 1024
    return 0.0


def drive(
    server: Server,
    name: str,
    choose: Callable[[random.Random], str],
    seconds: float,
    idle_rss: float,
) -> Run:
    """`CLIENTS` closed-loop clients for `seconds`, each request to the model `choose` picks."""
    run = Run(name)
    body = tensor_body(WIDTH)
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=server.url, timeout=60) as http:
            while time.monotonic() < stop:
                model = choose(rng)
                started = time.perf_counter()
                answer = http.post(
                    f"/v2/models/{model}/infer",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                took = (time.perf_counter() - started) * 1000
                load = re.search(r"load;dur=([\d.]+)", answer.headers.get("server-timing", ""))
                with lock:
                    if answer.status_code != 200:
                        run.failures.append(f"{answer.status_code} {answer.text[:120]}")
                    elif load is None:
                        run.hot_ms.append(took)
                    else:
                        run.cold_ms.append(took)
                        run.load_ms.append(float(load.group(1)))

    def monitor() -> None:
        while time.monotonic() < stop:
            held, _ = resident_bytes(server.url)
            run.held_max = max(run.held_max, held)
            over = process_rss(server.process.pid) - idle_rss
            run.rss_over_idle_max = max(run.rss_over_idle_max, over)
            time.sleep(0.1)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    threads.append(threading.Thread(target=monitor))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.evictions = resident_bytes(server.url)[1]
    return run


def zipf_chooser(names: list[str], s: float = 1.1) -> Callable[[random.Random], str]:
    weights = [1 / (rank + 1) ** s for rank in range(len(names))]
    return lambda rng: rng.choices(names, weights)[0]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(values, q))


def many_models(root: Path, seconds: float) -> tuple[list[Run], float, float]:
    names = [f"model{i:03d}" for i in range(MODELS)]
    for index, name in enumerate(names):
        small_model(root / name / "1" / "model.onnx", index)
        write_config(root / name, ON_DEMAND)
    uniform: Callable[[random.Random], str] = lambda rng: rng.choice(names)  # noqa: E731
    skewed = zipf_chooser(names)
    runs = []
    # everything fits: each model loaded once, then all hot
    started = time.perf_counter()
    server = Server(root, *UNLIMITED)
    try:
        print(f"100 on-demand models ready in {time.perf_counter() - started:.1f} s", flush=True)
        idle_rss = process_rss(server.process.pid)
        body = tensor_body(WIDTH)
        for name in names:
            answer = httpx.post(
                f"{server.url}/v2/models/{name}/infer",
                content=body,
                headers={"content-type": "application/json"},
                timeout=60,
            )
            assert answer.status_code == 200, answer.text
        text = httpx.get(server.url + "/metrics", timeout=10).text
        footprints = [
            float(v) for v in re.findall(r"^inferd_model_resident_bytes\{.*\} (\S+)$", text, re.M)
        ]
        footprint = statistics.median(footprints)
        for label, choose in (("uniform", uniform), ("Zipf 1.1", skewed)):
            run = drive(server, f"all fit, {label}", choose, seconds, idle_rss)
            runs.append(run)
            print(summary(run), flush=True)
    finally:
        server.stop()
    budget_mb = FITS * footprint * 1.05 / 2**20
    server = Server(root, "--model-memory-budget-mb", f"{budget_mb:.1f}", *UNLIMITED)
    try:
        idle_rss = process_rss(server.process.pid)
        for label, choose in (("uniform", uniform), ("Zipf 1.1", skewed)):
            run = drive(server, f"budget for {FITS}, {label}", choose, seconds, idle_rss)
            runs.append(run)
            print(summary(run), flush=True)
            for failure in sorted(set(run.failures)):
                print(f"  failed: {failure}", flush=True)
    finally:
        server.stop()
    return runs, footprint, budget_mb


def cold_starts(root: Path, rounds: int) -> list[tuple[str, list[float], float]]:
    """Every request a cold start: two copies of a model under a budget of one version."""
    demo = build_demo(root / "demo")
    minilm = root / "cold-minilm"
    for copy in ("a", "b"):
        shutil.copytree(demo / "minilm", minilm / f"minilm-{copy}")
        config = yaml.safe_load((minilm / f"minilm-{copy}" / "config.yaml").read_text())
        config["residency"] = "on_demand"
        config.pop("default", None)
        write_config(minilm / f"minilm-{copy}", config)
    big = root / "cold-big"
    for copy in ("a", "b"):
        big_model(big / f"big-{copy}" / "1" / "model.onnx", 100)
        write_config(big / f"big-{copy}", ON_DEMAND)
    rows = []
    for label, repo, ask in (
        ("demo minilm (86 MB file), first /embed", minilm, _embed),
        ("100 MB tensor model, first /v2 infer", big, _tiny_infer),
    ):
        server = Server(repo, "--max-loaded-versions", "1", *UNLIMITED)
        try:
            names = sorted(p.name for p in repo.iterdir())
            took, footprints = [], 0.0
            for index in range(rounds * 2):
                name = names[index % 2]
                started = time.perf_counter()
                answer = ask(server.url, name)
                assert answer.status_code == 200, answer.text
                assert "load;dur" in answer.headers["server-timing"]
                took.append((time.perf_counter() - started) * 1000)
            footprints = max(
                float(v)
                for v in re.findall(
                    r"^inferd_model_resident_bytes\{.*\} (\S+)$",
                    httpx.get(server.url + "/metrics", timeout=10).text,
                    re.M,
                )
            )
            rows.append((label, took, footprints))
            print(label, [round(t) for t in took], flush=True)
        finally:
            server.stop()
    return rows


def _embed(url: str, name: str) -> httpx.Response:
    return httpx.post(f"{url}/embed", json={"model": name, "texts": ["a cold start"]}, timeout=60)


def _tiny_infer(url: str, name: str) -> httpx.Response:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1.0] * 4}]}
    return httpx.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)


def summary(run: Run) -> str:
    total = len(run.hot_ms) + len(run.cold_ms) + len(run.failures)
    return (
        f"| {run.name} | {total} | {len(run.failures)} | {len(run.cold_ms)} | "
        f"{percentile(run.hot_ms, 50):.1f} | {percentile(run.hot_ms, 99):.1f} | "
        f"{percentile(run.cold_ms, 50):.1f} | {percentile(run.cold_ms, 99):.1f} | "
        f"{run.evictions:.0f} | {run.held_max / 2**20:.1f} | {run.rss_over_idle_max / 2**20:.1f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="cold starts of each model")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds = 5, 2
    with tempfile.TemporaryDirectory(prefix="inferd-residency-") as tmp:
        runs, footprint, budget_mb = many_models(Path(tmp) / "many", args.seconds)
        colds = cold_starts(Path(tmp), args.rounds)
    command = ("python benchmarks/serving_bench.py residency " + " ".join(sys.argv[1:])).strip()
    fit_uniform, fit_zipf, budget_uniform, budget_zipf = runs
    lines = [
        f"### Many models: {MODELS} on-demand models, a budget for {FITS}",
        "",
        f"Machine: {machine_description()}.",
        f"Server: `inferd serve` on {MODELS} tensor models (`residency: on_demand`, a 256x2048 "
        f"MatMul each), {CLIENTS} closed-loop clients for {args.seconds:g} s, each request to "
        "a model chosen at random (uniform, or Zipf with exponent 1.1 over the models' ranks). "
        f"All fit: no budget, every model loaded before the clock. Budget: "
        f"`--model-memory-budget-mb {budget_mb:.1f}`, {FITS} times the median footprint "
        f"measured ({footprint / 2**20:.1f} MB) plus 5%. Hot: a request whose model was in "
        "memory; cold: one that waited for its load (`Server-Timing` `load`). Held: the most "
        "the resident versions' footprints summed to (sampled every 100 ms); RSS over idle: "
        "the server's resident memory over what it held with nothing loaded.",
        "",
        f"Command: `{command}`",
        "",
        "| run | requests | failed | cold | hot p50 ms | hot p99 ms | cold p50 ms | cold p99 ms "
        "| evictions | held max MB | RSS over idle max MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(summary(run) for run in runs),
        "",
        "Hot p99 with evictions against all fitting: uniform "
        f"{percentile(budget_uniform.hot_ms, 99) / percentile(fit_uniform.hot_ms, 99):.2f}x, "
        f"Zipf {percentile(budget_zipf.hot_ms, 99) / percentile(fit_zipf.hot_ms, 99):.2f}x. "
        "Cold starts (every request to the other of two copies, `--max-loaded-versions 1`): "
        + "; ".join(
            f"{label}: p50 {statistics.median(took):.0f} ms, max {max(took):.0f} ms over "
            f"{len(took)}, footprint {held / 2**20:.0f} MB"
            for label, took, held in colds
        )
        + ".",
    ]
    publish("residency", "\n".join(lines), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
