"""What `inferd bench` shows: a table in the terminal, JSON for machines, and an HTML report
with two plots (throughput against load, latency percentiles against throughput) saved as PNG
files that can also go in a README."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from inferd.bench.knee import Knee
from inferd.bench.steps import Step

PLOTS = ("throughput.png", "latency.png")


def level_name(mode: str) -> str:
    return "concurrency" if mode == "closed" else "arrivals/s"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def generates(steps: Sequence[Step]) -> bool:
    """Whether the steps measured generation (then tokens per second are shown)."""
    return any(s.tokens_per_s > 0 for s in steps)


def step_row(step: Step, recommended: bool, tokens: bool = False) -> list[str]:
    server = step.server
    errors = ", ".join(f"{code}: {n}" for code, n in sorted(step.errors.items())) or "0"
    return [
        ("★ " if recommended else "") + _fmt(step.level, 0 if step.mode == "closed" else 1),
        str(step.requests),
        _fmt(step.requests_per_s),
        _fmt(step.items_per_s),
        *([_fmt(step.tokens_per_s)] if tokens else []),
        _fmt(step.p50_ms),
        _fmt(step.p90_ms),
        _fmt(step.p95_ms),
        _fmt(step.p99_ms),
        _fmt(step.max_ms),
        errors,
        _fmt(server.mean_batch_size if server else None, 2),
        _fmt(server.mean_queue_ms if server else None, 2),
    ]


def header(mode: str, tokens: bool) -> list[str]:
    return [
        level_name(mode),
        "requests",
        "req/s",
        "items/s",
        *(["tokens/s"] if tokens else []),
        "p50 ms",
        "p90 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "errors",
        "batch (server)",
        "queue ms (server)",
    ]


def print_table(console: Console, title: str, steps: Sequence[Step], knee: Knee) -> None:
    if not steps:
        return
    tokens = generates(steps)
    table = Table(title=title, title_justify="left")
    for column in header(steps[0].mode, tokens):
        table.add_column(column, justify="right")
    for i, step in enumerate(steps):
        table.add_row(*step_row(step, i == knee.index, tokens))
    console.print(table)
    best = steps[knee.index]
    rate = f"{best.requests_per_s:.1f} req/s" + (
        f" ({best.tokens_per_s:.0f} tokens/s)" if tokens else ""
    )
    console.print(
        f"Recommended operating point: {level_name(best.mode)} {_fmt(best.level, 1)} — "
        f"{rate} at p99 {best.p99_ms:.1f} ms ({knee.reason})",
        soft_wrap=True,
    )


def _plots(out: Path, series: Mapping[str, Sequence[Step]], knees: Mapping[str, Knee]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mode = next(iter(series.values()))[0].mode
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, steps in series.items():
        xs = [s.level for s in steps]
        ax.plot(xs, [s.requests_per_s for s in steps], marker="o", label=f"{name} req/s")
        if any(s.items_per_s != s.requests_per_s for s in steps):
            ax.plot(
                xs,
                [s.items_per_s for s in steps],
                marker=".",
                linestyle="--",
                label=f"{name} items/s",
            )
        knee = steps[knees[name].index]
        ax.scatter(
            [knee.level],
            [knee.requests_per_s],
            s=160,
            facecolors="none",
            edgecolors="red",
            zorder=5,
        )
    if mode == "closed":
        ax.set_xscale("log", base=2)
    ax.set_xlabel(level_name(mode))
    ax.set_ylabel("throughput per second")
    ax.set_title("Throughput against load (circle: recommended point)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / PLOTS[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, steps in series.items():
        xs = [s.requests_per_s for s in steps]
        for field, style in (("p50_ms", ":"), ("p90_ms", "--"), ("p99_ms", "-")):
            ax.plot(
                xs,
                [getattr(s, field) for s in steps],
                linestyle=style,
                marker="o",
                label=f"{name} {field[:3]}",
            )
    ax.set_yscale("log")
    ax.set_xlabel("throughput (requests per second)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency percentiles against throughput")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / PLOTS[1], dpi=110)
    plt.close(fig)


def _section(name: str, steps: Sequence[Step], knee: Knee) -> str:
    """One series' table, its recommended step first in words and marked in the table."""
    best = steps[knee.index]
    tokens = generates(steps)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header(steps[0].mode, tokens))
    rows = "".join(
        "<tr"
        + (' class="best"' if i == knee.index else "")
        + ">"
        + "".join(f"<td>{html.escape(c)}</td>" for c in step_row(s, i == knee.index, tokens))
        + "</tr>"
        for i, s in enumerate(steps)
    )
    return (
        f"<h2>{html.escape(name)}</h2><p class='verdict'>Recommended: "
        f"{level_name(best.mode)} {best.level:g}, {best.requests_per_s:.1f} req/s at p99 "
        f"{best.p99_ms:.1f} ms. {html.escape(knee.reason)}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    )


def write_report(
    out: Path,
    title: str,
    series: Mapping[str, Sequence[Step]],
    knees: Mapping[str, Knee],
    meta: Mapping[str, Any],
) -> Path:
    """report.json, the two PNG plots and report.html under `out`; returns the HTML file."""
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "title": title,
        "meta": dict(meta),
        "series": {
            name: {
                "steps": [s.to_dict() for s in steps],
                "recommended": knees[name].index,
                "knee_found": knees[name].found,
                "knee": knees[name].reason,
            }
            for name, steps in series.items()
        },
    }
    (out / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    _plots(out, series, knees)
    sections = [_section(name, steps, knees[name]) for name, steps in series.items()]
    facts = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in meta.items()
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; max-width: 70rem; }}
table {{ border-collapse: collapse; font-size: 0.9rem; }}
td, th {{ border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }}
tr.best {{ background: #fff3c4; font-weight: bold; }}
figure {{ display: inline-block; margin: 0 1rem 1rem 0; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<ul>{facts}</ul>
<figure><img src="{PLOTS[0]}" alt="throughput against load">
<figcaption>Throughput against load</figcaption></figure>
<figure><img src="{PLOTS[1]}" alt="latency percentiles against throughput">
<figcaption>Latency percentiles against throughput</figcaption></figure>
{"".join(sections)}
</body></html>
"""
    target = out / "report.html"
    target.write_text(page)
    return target
