"""What the preparation commands show people: a spinner or a bar on each step that takes a
moment, a check mark with its duration when it ends, and summary tables."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class Reporter:
    def __init__(self, console: Console | None = None) -> None:
        self.out = console or Console()
        self.err = Console(stderr=True)

    @contextmanager
    def step(self, text: str) -> Iterator[None]:
        start = time.perf_counter()
        with self.err.status(text):
            yield
        self.err.print(f"[green]✓[/green] {text} ({time.perf_counter() - start:.1f} s)")

    @contextmanager
    def bar(self, text: str, total: int) -> Iterator[Callable[[], None]]:
        start = time.perf_counter()
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.err, transient=True) as progress:
            task = progress.add_task(text, total=total)
            yield lambda: progress.advance(task)
        self.err.print(f"[green]✓[/green] {text} ({time.perf_counter() - start:.1f} s)")

    def table(self, title: str, rows: list[tuple[str, str]]) -> None:
        table = Table(title=title, show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column()
        for key, value in rows:
            table.add_row(key, value)
        self.out.print(table)

    def grid(self, title: str, header: list[str], rows: list[list[str]]) -> None:
        table = Table(title=title, title_justify="left")
        for h in header:
            table.add_column(h)
        for row in rows:
            table.add_row(*row)
        self.out.print(table)

    def ok(self, text: str) -> None:
        self.err.print(f"[green]✓[/green] {text}", highlight=False, soft_wrap=True)

    def fail(self, text: str) -> None:
        self.err.print(f"[bold red]✗[/bold red] {text}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        self.err.print(f"[yellow]![/yellow] {text}", highlight=False, soft_wrap=True)


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
