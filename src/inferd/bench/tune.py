"""Tuning mode: sweep a model's batching settings (a grid of max_batch_size,
dynamic_batching.max_queue_delay_ms, instance_count, solo_threads or any other setting) against
a p99 latency budget, each setting served fresh on a temporary copy of the model, each sweep
stopped at its knee as model_analyzer does; the recommendation is the setting with the highest
throughput within the budget, and among those within 5% of it, the fastest for a lone
request."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from inferd.bench.steps import Step
from inferd.bench.sweep import SweepSettings, run_sweep, served
from inferd.bench.workload import Workload

DEFAULT_GRID: dict[str, list[Any]] = {
    "max_batch_size": [1, 8, 32],
    "dynamic_batching.max_queue_delay_ms": [1, 5],
}


THROUGHPUT_TIE = 0.05
"""Settings whose throughput in the budget is within this share of the best count as tied."""


@dataclass(frozen=True)
class Trial:
    settings: dict[str, Any]
    steps: list[Step]
    best: Step | None
    """The highest-throughput step with p99 within the budget (None: none was)."""


def combinations(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(grid[k] for k in keys))
    ]


def within_budget(steps: Sequence[Step], budget_ms: float) -> Step | None:
    fitting = [s for s in steps if s.ok and s.p99_ms <= budget_ms and not s.errors]
    return max(fitting, key=lambda s: s.requests_per_s, default=None)


def tune(
    repo: Path,
    model: str,
    grid: Mapping[str, Sequence[Any]],
    budget_ms: float,
    make_workload: Callable[[str], Workload],
    settings: SweepSettings,
    console: Console,
) -> list[Trial]:
    trials = []
    sweep = SweepSettings(**{**settings.__dict__, "stop_at_knee": True})
    for combo in combinations(grid):
        label = ", ".join(f"{k}={v}" for k, v in combo.items())
        console.print(f"[bold]{label}[/bold]")
        with served(str(repo), model, combo) as url:
            steps = run_sweep(url, make_workload(url), sweep, model, console, "  ")
        trials.append(Trial(combo, steps, within_budget(steps, budget_ms)))
    return trials


def recommend(trials: Sequence[Trial]) -> Trial | None:
    """The most throughput within the budget; among settings within THROUGHPUT_TIE of it (as
    good under load, within a sweep's noise), the one that answers a lone request fastest
    (p50 at the lowest level): light traffic counts too (`solo_threads` wins there)."""
    fitting = [(t, t.best) for t in trials if t.best is not None]
    if not fitting:
        return None
    top = max(best.requests_per_s for _, best in fitting)
    close = [t for t, best in fitting if best.requests_per_s >= top * (1 - THROUGHPUT_TIE)]
    return min(close, key=lambda t: (_lone_p50_ms(t), -(t.best.requests_per_s if t.best else 0)))


def _lone_p50_ms(trial: Trial) -> float:
    answered = [s for s in trial.steps if s.ok]
    lowest = min(answered, key=lambda s: s.level, default=None)
    return lowest.p50_ms if lowest is not None else float("inf")


def print_trials(console: Console, trials: Sequence[Trial], budget_ms: float) -> None:
    table = Table(title=f"Settings against a p99 budget of {budget_ms:g} ms", title_justify="left")
    for column in ("settings", "best level", "req/s in budget", "p99 ms", "peak req/s"):
        table.add_column(column, justify="right")
    chosen = recommend(trials)
    for t in trials:
        peak = max((s.requests_per_s for s in t.steps), default=0.0)
        mark = "★ " if t is chosen else ""
        if t.best is None:
            table.add_row(mark + _label(t.settings), "-", "none within budget", "-", f"{peak:.1f}")
        else:
            best = t.best
            cells = [f"{best.level:g}", f"{best.requests_per_s:.1f}", f"{best.p99_ms:.1f}"]
            table.add_row(mark + _label(t.settings), *cells, f"{peak:.1f}")
    console.print(table)


def _label(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())
