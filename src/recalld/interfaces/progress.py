"""Progress bars of the CLI's long tasks, on stderr and only on a terminal, and the
files such a task wrote.

Apart from :mod:`recalld.interfaces.render` so that a search's output does not import them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """How many items a second the task is advancing (rich's own estimate, recent steps)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        shown = "?" if speed is None else f"{speed:.1f}" if speed < 10 else f"{speed:.0f}"
        return Text(f"{shown} {self.unit}/s", style="progress.data.speed")


def bar_columns(label: str, unit: str) -> tuple[ProgressColumn, ...]:
    """Label, bar, done/total, rate and time remaining: the columns of every long task."""
    return (
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(unit),
        TimeRemainingColumn(),
    )


@contextmanager
def progress_bar(
    label: str, total: int, quiet: bool, unit: str = "memories"
) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr, shown only on a terminal; yields the advancing callback."""
    stderr = Console(stderr=True)
    if quiet or total == 0 or not stderr.is_terminal:
        yield lambda n: None
        return
    columns = bar_columns(label, unit)
    with Progress(*columns, console=stderr, transient=False) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def file_progress(
    label: str, quiet: bool, unit: str = "files"
) -> Iterator[Callable[[int, int], None]]:
    """A progress bar whose total is known only once work starts.

    Yields a callback taking (done, total); shown only on a terminal.
    """
    stderr = Console(stderr=True)
    if quiet or not stderr.is_terminal:
        yield lambda done, total: None
        return
    columns = bar_columns(label, unit)
    with Progress(*columns, console=stderr, transient=True) as progress:
        task = progress.add_task(label, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total)


def tell_written(paths: list[Path], skipped: list[str], quiet: bool) -> None:
    """Name the files written (on stdout, unless it carries JSON) and what was skipped
    (always, on stderr)."""
    if not quiet:
        for path in paths:
            click.echo(f"wrote {path}")
    for note in skipped:
        click.echo(note, err=True)
