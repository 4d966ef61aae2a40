"""The three `inferd bench` commands put together: run (one target), tune (a repository's
model against a latency budget), compare (two targets)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from inferd.bench.compare import comparison_rows, print_comparison
from inferd.bench.knee import find_knee, within_budget
from inferd.bench.report import print_table, write_report
from inferd.bench.steps import Step
from inferd.bench.sweep import SweepSettings, run_sweep, served, target_url
from inferd.bench.tune import print_trials, recommend, tune
from inferd.bench.variants import write_settings
from inferd.bench.workload import Lengths, Workload, build_workload


@dataclass(frozen=True)
class WorkloadSpec:
    endpoint: str
    model: str | None
    inputs: Path | None
    lengths: Lengths
    batch: int
    max_new_tokens: int
    v2_length: int
    seed: int
    count: int = 256

    def build(self, url: str) -> Workload:
        return build_workload(
            url,
            self.endpoint,
            self.model,
            inputs=self.inputs,
            lengths=self.lengths,
            count=self.count,
            batch=self.batch,
            max_new_tokens=self.max_new_tokens,
            v2_length=self.v2_length,
            seed=self.seed,
        )


def _knee(steps: list[Step], settings: SweepSettings) -> Any:
    throughput, p99 = [s.requests_per_s for s in steps], [s.p99_ms for s in steps]
    levels = [s.level for s in steps]
    knee = find_knee(throughput, p99, settings.p99_rise, settings.gain, levels)
    return within_budget(knee, throughput, p99, settings.p99_budget_ms, levels)


def _meta(
    target: str, spec: WorkloadSpec, workload: Workload, settings: SweepSettings
) -> dict[str, Any]:
    from inferd.bench.machine import describe

    return {
        "target": target,
        "endpoint": f"{spec.endpoint} ({workload.path})",
        "model": spec.model or "(the server's default)",
        "inputs": workload.description,
        "items per request": workload.items_per_request,
        "load": f"{settings.mode} loop; levels {', '.join(f'{x:g}' for x in settings.levels)}; "
        f"{settings.duration_s:g} s or {settings.max_requests} requests a step; "
        f"warm-up {settings.warmup_s:g} s",
        "p99 budget": f"{settings.p99_budget_ms:g} ms"
        if settings.p99_budget_ms is not None
        else "none given: any p99 up to the knee",
        "machine": describe(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def run(
    target: str, spec: WorkloadSpec, settings: SweepSettings, out: Path, console: Console
) -> int:
    with target_url(target) as url:
        workload = spec.build(url)
        steps = run_sweep(url, workload, settings, spec.model, console)
    knee = _knee(steps, settings)
    print_table(console, f"inferd bench: {target}", steps, knee)
    page = write_report(
        out,
        f"inferd bench: {target}",
        {target: steps},
        {target: knee},
        _meta(target, spec, workload, settings),
    )
    console.print(f"Report: {page} (JSON: {out / 'report.json'})")
    return 0 if all(s.ok for s in steps) else 1


def compare(
    targets: tuple[str, str],
    overrides: tuple[dict[str, Any], dict[str, Any]],
    repo_model: str | None,
    spec: WorkloadSpec,
    settings: SweepSettings,
    out: Path,
    console: Console,
) -> int:
    series: dict[str, list[Step]] = {}
    workload = None
    names = []
    for index, (target, extra) in enumerate(zip(targets, overrides, strict=True)):
        name = (
            ("A: " if index == 0 else "B: ")
            + target
            + (" " + " ".join(f"{k}={v}" for k, v in extra.items()) if extra else "")
        )
        names.append(name)
        console.print(f"[bold]{name}[/bold]")
        with served(target, repo_model, extra) as url:
            workload = spec.build(url)
            series[name] = run_sweep(url, workload, settings, spec.model, console)
    a, b = series[names[0]], series[names[1]]
    knees = {n: _knee(s, settings) for n, s in series.items()}
    for n, s in series.items():
        print_table(console, n, s, knees[n])
    print_comparison(console, (names[0], names[1]), a, b)
    assert workload is not None
    meta = _meta(" vs ".join(names), spec, workload, settings)
    meta["ratios (B/A)"] = ", ".join(
        f"{r['level']:g}: {r['throughput_ratio']:.2f}x req/s, {r['p99_ratio']:.2f}x p99"
        for r in comparison_rows(a, b)
    )
    page = write_report(out, "inferd bench: comparison", series, knees, meta)
    console.print(f"Report: {page}")
    return 0


def run_tune(
    repo: Path,
    model: str,
    grid: dict[str, list[Any]],
    budget_ms: float,
    spec: WorkloadSpec,
    settings: SweepSettings,
    write: bool,
    out: Path,
    console: Console,
) -> int:
    trials = tune(repo, model, grid, budget_ms, spec.build, settings, console)
    print_trials(console, trials, budget_ms)
    chosen = recommend(trials)
    series = {", ".join(f"{k}={v}" for k, v in t.settings.items()): t.steps for t in trials}
    knees = {n: _knee(s, settings) for n, s in series.items()}
    meta: dict[str, Any] = {"repository": str(repo), "model": model, "p99 budget ms": budget_ms}
    if chosen is None or chosen.best is None:
        console.print(f"No setting met p99 <= {budget_ms:g} ms at any load level.")
        meta["recommendation"] = "none within budget"
        write_report(out, f"inferd bench tune: {model}", series, knees, meta)
        return 1
    meta["recommendation"] = (
        f"{chosen.settings} at concurrency {chosen.best.level:g}: "
        f"{chosen.best.requests_per_s:.1f} req/s, p99 "
        f"{chosen.best.p99_ms:.1f} ms"
    )
    console.print(f"Recommended: {meta['recommendation']}")
    if write:
        path = write_settings(repo, model, chosen.settings)
        console.print(f"Written to {path}")
    page = write_report(out, f"inferd bench tune: {model}", series, knees, meta)
    console.print(f"Report: {page}")
    return 0
