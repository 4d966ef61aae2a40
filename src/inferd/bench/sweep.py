"""A sweep: warm-up, then one load step per level (concurrency or arrival rate), each bounded
in time and requests, with the server's metrics scraped around it and a live progress bar;
optionally stopped early once the knee is passed."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from inferd.bench.knee import GAIN, P99_RISE, past_knee
from inferd.bench.launch import start_server
from inferd.bench.load import LoadRun, closed_loop, open_loop
from inferd.bench.scrape import scrape, server_view
from inferd.bench.steps import Step, summarize
from inferd.bench.variants import variant
from inferd.bench.workload import Workload

CLOSED_LEVELS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class SweepSettings:
    mode: str = "closed"
    levels: tuple[float, ...] = CLOSED_LEVELS
    duration_s: float = 10.0
    max_requests: int = 2000
    warmup_s: float = 2.0
    seed: int = 0
    stop_at_knee: bool = False
    p99_rise: float = P99_RISE
    gain: float = GAIN
    timeout_s: float = 60.0
    p99_budget_ms: float | None = None
    """The recommended step's p99 at most; None: any p99 up to the knee."""


def run_sweep(
    url: str,
    workload: Workload,
    settings: SweepSettings,
    model: str | None,
    console: Console,
    label: str = "",
) -> list[Step]:
    next_body = workload.cycle()
    if settings.warmup_s > 0:
        warmup = closed_loop(
            url, workload.path, next_body, 2, settings.warmup_s, 10**9, timeout_s=settings.timeout_s
        )
        asyncio.run(warmup)
    steps: list[Step] = []
    unit = "concurrency" if settings.mode == "closed" else "rate"
    for level in settings.levels:
        before = scrape(url)
        run = _one_level(url, workload, settings, level, next_body, console, f"{label}{unit}")
        step = summarize(
            settings.mode,
            float(level),
            run,
            workload.items_per_request,
            server_view(before, scrape(url), model),
        )
        steps.append(step)
        console.print(
            f"  {label}{unit} {level:g}: {step.requests_per_s:.1f} req/s, "
            f"p99 {step.p99_ms:.1f} ms, {step.requests - step.ok} errors"
        )
        if settings.stop_at_knee and past_knee(
            [s.requests_per_s for s in steps],
            [s.p99_ms for s in steps],
            settings.p99_rise,
            settings.gain,
        ):
            console.print(f"  {label}past the knee: sweep stopped")
            break
    return steps


def _one_level(
    url: str,
    workload: Workload,
    settings: SweepSettings,
    level: float,
    next_body: Callable[[], bytes],
    console: Console,
    what: str,
) -> LoadRun:
    """One step of the sweep at `level` (clients, or requests a second), with its progress
    bar."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(f"{what} {level:g}", total=settings.max_requests)

        def tick(done: int) -> None:
            progress.update(task, completed=done)

        path, seconds, most = workload.path, settings.duration_s, settings.max_requests
        if settings.mode == "closed":
            return asyncio.run(
                closed_loop(
                    url, path, next_body, int(level), seconds, most, tick, settings.timeout_s
                )
            )
        return asyncio.run(
            open_loop(
                url,
                path,
                next_body,
                float(level),
                seconds,
                most,
                settings.seed,
                tick,
                settings.timeout_s,
            )
        )


def is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


@contextlib.contextmanager
def served(target: str, model: str | None, settings: dict[str, Any]) -> Iterator[str]:
    """`target_url`, with `settings` applied to the repository's `model` first (a URL takes
    no settings: they are a server's, not the tool's)."""
    if not settings or is_url(target):
        with target_url(target) as url:
            yield url
        return
    if model is None:
        raise ValueError("settings for a repository target need --model")
    with variant(Path(target), model, settings) as root, target_url(str(root)) as url:
        yield url


@contextlib.contextmanager
def target_url(target: str, serve_args: tuple[str, ...] = ()) -> Iterator[str]:
    """A URL as it is; a repository path served by a fresh `inferd serve` for the duration,
    without response caches (the load repeats its texts: a cache would measure itself, not
    the model)."""
    if is_url(target):
        try:
            httpx.get(target.rstrip("/") + "/health", timeout=5)
        except httpx.HTTPError as exc:
            raise ConnectionError(f"{target}: not reachable ({exc})") from exc
        yield target.rstrip("/")
        return
    repo = Path(target)
    if not repo.is_dir():
        raise FileNotFoundError(f"{target}: neither a URL nor a repository folder")
    logs = Path(tempfile.mkdtemp(prefix="inferd-bench-"))
    server = start_server(
        repo, logs / "server.log", "--log-level", "warning", "--no-response-cache", *serve_args
    )
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(logs, ignore_errors=True)
