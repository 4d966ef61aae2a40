"""Comparison mode: the same sweep against two targets (two servers, or two configurations of
one repository: batching on vs off, fp32 vs int8), side by side with ratios."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from inferd.bench.steps import Step


def ratio(b: float, a: float) -> str:
    return "-" if not a or a != a or b != b else f"{b / a:.2f}x"


def print_comparison(
    console: Console, names: tuple[str, str], a: Sequence[Step], b: Sequence[Step]
) -> None:
    table = Table(title=f"{names[1]} against {names[0]}", title_justify="left")
    mode = a[0].mode if a else "closed"
    for column in (
        "concurrency" if mode == "closed" else "arrivals/s",
        f"req/s {names[0]}",
        f"req/s {names[1]}",
        "throughput ratio",
        f"p99 ms {names[0]}",
        f"p99 ms {names[1]}",
        "p99 ratio",
    ):
        table.add_column(column, justify="right")
    for sa, sb in zip(a, b, strict=False):
        table.add_row(
            f"{sa.level:g}",
            f"{sa.requests_per_s:.1f}",
            f"{sb.requests_per_s:.1f}",
            ratio(sb.requests_per_s, sa.requests_per_s),
            f"{sa.p99_ms:.1f}",
            f"{sb.p99_ms:.1f}",
            ratio(sb.p99_ms, sa.p99_ms),
        )
    console.print(table)


def comparison_rows(a: Sequence[Step], b: Sequence[Step]) -> list[dict[str, float]]:
    return [
        {
            "level": sa.level,
            "throughput_ratio": sb.requests_per_s / sa.requests_per_s
            if sa.requests_per_s
            else float("nan"),
            "p99_ratio": sb.p99_ms / sa.p99_ms if sa.p99_ms else float("nan"),
        }
        for sa, sb in zip(a, b, strict=False)
    ]
