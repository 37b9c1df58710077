"""Console output shared by the commands: Rich tables for people, JSON for machines, one error format."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no Rich markup or wrapping, so it pipes into ``jq``)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def table(title: str, columns: list[str], rows: list[list[Any]], right: set[int] | None = None) -> Table:
    t = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        t.add_column(col, justify="right" if right and i in right else "left")
    for row in rows:
        t.add_row(*(str(c) for c in row))
    return t


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a clear one-block error (no traceback) and exit non-zero."""
    err_console.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


class _Progress:
    """A Rich progress bar driven by text updates; a no-op when disabled (``--json``)."""

    def __init__(self, disable: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            disable=disable,
            transient=True,
        )

    def __enter__(self) -> tuple[Callable[[str], None], Callable[[int], None]]:
        self._progress.__enter__()
        task = self._progress.add_task("starting", total=None)

        def advance(description: str) -> None:
            self._progress.update(task, description=description, advance=1)

        def total(n: int) -> None:
            self._progress.update(task, total=n, completed=0)

        return advance, total

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)


def progress(disable: bool = False) -> _Progress:
    return _Progress(disable)
