"""inferd on Ray Serve against inferd alone, on the same cores: what one replica serves
through Serve's Python HTTP proxy, and through Serve's direct ingress (HAProxy in front, each
replica's own HTTP server behind it: `inferd ray serve`'s way), as a share of what
`inferd serve` serves by itself.

The demo model (all-MiniLM-L6-v2, its demo configuration), one text of 8-100 words a request
on /embed, a closed loop of `--concurrency` requests by `inferd bench`'s own client on the same
machine. Ray: a local one-node cluster (`ray start --head` with every core of the machine), one
replica with every core; Ray's own processes share those cores, as they would on a node. Each
way of ingress needs its own cluster (a cluster-wide setting): `--rounds` rounds on each,
each round measuring inferd alone right before; medians are reported.

    python benchmarks/ray_bench.py            # writes the "ray" section of RESULTS.md
    python benchmarks/ray_bench.py --quick
    python benchmarks/ray_bench.py residency  # 100 models on 2 replicas, routed by model or not
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))

from common import Server, machine_description, parts_help, publish, run_entry
from inferd.bench.sweep import SweepSettings, run_sweep
from inferd.bench.workload import Lengths, build_workload
from inferd.tools.demo import build_demo

MODEL = "minilm"
PARTS = {
    "residency": (
        "ray_residency_bench",
        "100 on-demand models on 2 replicas: cold loads routed by model (Serve's multiplexing) "
        "or not",
    ),
}


def measure(url: str, settings: SweepSettings, console: Console) -> tuple[float, float]:
    workload = build_workload(
        url,
        "embed",
        MODEL,
        inputs=None,
        lengths=Lengths.parse("loguniform:8-100"),
        count=256,
        batch=1,
        max_new_tokens=0,
        v2_length=0,
        seed=0,
    )
    (step,) = run_sweep(url, workload, settings, MODEL, console)
    assert not step.errors, step.errors
    return step.requests_per_s, step.p99_ms


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=parts_help(PARTS),
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=12.0)
    args = parser.parse_args()
    rounds, seconds = (1, 5.0) if args.quick else (args.rounds, args.seconds)
    settings_sweep = SweepSettings(
        levels=(float(args.concurrency),), duration_s=seconds, max_requests=10**6, warmup_s=2.0
    )
    console = Console(quiet=True)
    cores = os.cpu_count() or 1
    import ray
    from ray import serve

    from inferd.config.server_settings import ServerSettings
    from inferd.rayserve.deploy import RayDeployment, deploy
    from inferd.rayserve.local import LocalRay

    with tempfile.TemporaryDirectory(prefix="inferd-ray-bench-") as folder:
        root = Path(folder)
        repo = root / "repo"
        build_demo(repo)
        results: dict[str, list[tuple[float, float]]] = {"proxy": [], "direct": []}
        paired: dict[str, list[tuple[float, float]]] = {"proxy": [], "direct": []}
        alone = Server(repo)
        try:
            for name, direct_ingress in (("proxy", False), ("direct", True)):
                cluster = LocalRay(
                    root / name, nodes=1, cpus_per_node=cores, direct_ingress=direct_ingress
                )
                saved = dict(os.environ)
                os.environ.update({k: v for k, v in cluster.env.items() if k.startswith("RAY_")})
                try:
                    ray.init(
                        address=cluster.address, logging_level=logging.ERROR, log_to_driver=False
                    )
                    serve.start(http_options={"host": "127.0.0.1", "port": cluster.http_port})
                    settings = ServerSettings(repository=repo, log_level="warning")
                    deploy(RayDeployment(settings, num_cpus=float(cores)))
                    url = f"http://127.0.0.1:{cluster.http_port}"
                    for index in range(rounds):
                        for label, target in (("alone", alone.url), (name, url)):
                            rate, p99 = measure(target, settings_sweep, console)
                            (paired if label == "alone" else results)[name].append((rate, p99))
                            print(
                                f"{name} round {index + 1}, {label}: {rate:.1f} req/s, "
                                f"p99 {p99:.1f} ms",
                                flush=True,
                            )
                finally:
                    try:
                        serve.shutdown()
                        ray.shutdown()
                    finally:
                        cluster.stop()
                        os.environ.clear()
                        os.environ.update(saved)
        finally:
            alone.stop()

    def median_of(name: str, field: int) -> float:
        return statistics.median(r[field] for r in results[name])

    labels = {
        "proxy": "Ray Serve, its Python HTTP proxy",
        "direct": "Ray Serve, direct ingress (HAProxy to the replica's server)",
    }
    rows = []
    for name, label in labels.items():
        # each round against inferd alone measured right before it, on the same idle cluster
        alone_runs = paired[name]
        shares = [r[0] / a[0] for r, a in zip(results[name], alone_runs, strict=True)]
        rows.append(
            f"| {label} | {median_of(name, 0):.1f} | {median_of(name, 1):.1f} | "
            f"{statistics.median(a[0] for a in alone_runs):.1f} | "
            f"{statistics.median(shares):.2f} |"
        )
    text = "\n".join(
        [
            "## Ray Serve: one replica against inferd alone, on the same cores",
            f"Machine: {machine_description()}. "
            f"Demo model (all-MiniLM-L6-v2), /embed, one text of 8-100 words a request; closed "
            f"loop of {args.concurrency} by inferd bench's client on the same cores; "
            f"{rounds} rounds of {seconds:.0f} s on each way of ingress, `inferd serve` alone "
            "measured right before each round while the cluster idles (medians; the share is "
            f"the median of the rounds' ratios). Ray: a local one-node cluster with {cores} "
            "CPUs, one replica with all of them. "
            "Command: `python benchmarks/ray_bench.py" + (" --quick" if args.quick else "") + "`",
            "",
            "| served by | req/s | p99 ms | inferd alone, same rounds, req/s | share of alone |",
            "| --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    print(text)
    publish("ray", text, args.quick)


if __name__ == "__main__":
    run_entry(main, PARTS)
