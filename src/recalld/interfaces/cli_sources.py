"""``recalld index`` and ``recalld watch``: thin adapters over ``MemoryEngine.index/watch``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from recalld.interfaces.cli import (
    CONTEXT_SETTINGS,
    EXIT_SKIPPED_LINES,
    Ctx,
    emit_json,
    errors,
    pass_ctx,
)
from recalld.records import IMPORT_FORMATS

if TYPE_CHECKING:  # `recalld --help` lists this module's commands without loading numpy
    from recalld.sources.importer import ImportReport
    from recalld.sources.indexer import IndexReport

EXIT_NOTHING_INDEXED = 2
"""Exit status when the run leaves nothing searchable: an empty index must not pass quietly."""


def _glob_option(command: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--glob",
        "globs",
        multiple=True,
        help="Files to index under each folder, relative to it (repeatable; replaces the "
        "defaults MEMORY.md and memory/**/*.md).",
    )(command)


def print_report(report: IndexReport, as_json: bool) -> None:
    """One summary line, then each problem on standard error."""
    if as_json:
        emit_json({**report.__dict__, "empty": report.empty})
        return
    mb = report.bytes_indexed / 1e6
    click.echo(
        f"indexed {len(report.indexed)} file(s) ({report.chunks_added} chunks, {mb:.2f} MB), "
        f"unchanged {report.unchanged}, removed {len(report.removed)}, "
        f"{len(report.problems)} problem(s); {report.total_chunks} chunks from "
        f"{report.files} file(s) in the index ({report.seconds:.1f} s)"
    )
    for problem in report.problems:
        click.secho(f"warning: {problem.path}: {problem.message}", fg="yellow", err=True)
    if report.empty:
        click.secho(
            "error: the index holds no chunks from these files: nothing here is searchable",
            fg="red",
            err=True,
        )


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("paths", nargs=-1, type=click.Path(file_okay=True, dir_okay=True))
@_glob_option
@click.option("--force", is_flag=True, help="Re-chunk and re-embed every file.")
@click.option(
    "--max-file-mb",
    type=click.FloatRange(min=0.001),
    default=5.0,
    show_default=True,
    help="Larger files are skipped and reported.",
)
@click.option(
    "--follow-symlinks",
    is_flag=True,
    help="Follow symbolic links that lead out of the folder (by default they are "
    "skipped with a warning).",
)
@click.option(
    "--name",
    help="Make the folder a named collection (its files are then NAME/PATH, and its hits "
    "carry the name); with no PATH, re-index that collection.",
)
@click.option(
    "--context",
    "context_line",
    help="The collection's context line, returned beside its hits (needs --name; sub-paths: "
    "recalld collection context).",
)
@pass_ctx
def index(
    obj: Ctx,
    paths: tuple[str, ...],
    globs: tuple[str, ...],
    force: bool,
    max_file_mb: float,
    follow_symlinks: bool,
    name: str | None,
    context_line: str | None,
) -> None:
    """Index markdown memory files: MEMORY.md and memory/**/*.md under each PATH.

    Incremental: only files whose content changed are re-embedded, deleted files lose their
    chunks, and an interrupted run is completed by the next. With no PATH, every workspace
    indexed before is brought up to date. A symbolic link that resolves outside its folder
    is skipped with a warning unless --follow-symlinks. With --name the folder becomes a
    named collection (`recalld collection list`; `recalld get NAME/PATH`).
    """
    from recalld.interfaces.progress import file_progress

    with (
        errors(),
        obj.engine(create=True) as engine,
        file_progress("indexing", obj.as_json, "chunks") as progress,
    ):
        report = engine.index(
            paths,
            globs=globs or None,
            force=force,
            max_file_bytes=int(max_file_mb * 1e6),
            follow_symlinks=follow_symlinks,
            progress=progress,
            name=name,
            context=context_line,
        )
    print_report(report, obj.as_json)
    if report.empty:
        sys.exit(EXIT_NOTHING_INDEXED)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("paths", nargs=-1, type=click.Path(file_okay=True, dir_okay=True))
@_glob_option
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between scans for changes.",
)
@click.option(
    "--debounce",
    type=click.FloatRange(min=0.0),
    default=0.5,
    show_default=True,
    help="Seconds the files must stay unchanged before re-indexing.",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0.0),
    default=None,
    help="Stop after this long (default: until Ctrl-C).",
)
@pass_ctx
def watch(
    obj: Ctx,
    paths: tuple[str, ...],
    globs: tuple[str, ...],
    interval: float,
    debounce: float,
    max_seconds: float | None,
) -> None:
    """Keep the index of PATH in step with its files until Ctrl-C (or --max-seconds)."""
    if not obj.as_json:
        click.echo("watching (Ctrl-C to stop)", err=True)
    runs = 0
    try:
        with errors(), obj.engine(create=True) as engine:
            runs = engine.watch(
                paths,
                globs=globs or None,
                interval=interval,
                debounce=debounce,
                max_seconds=max_seconds,
                on_report=lambda r: print_report(r, obj.as_json),
            )
    except KeyboardInterrupt:
        if not obj.as_json:
            click.echo("stopped watching", err=True)
        return
    if not obj.as_json:
        click.echo(f"stopped watching after {runs} index run(s)", err=True)


@click.command(name="import", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--format",
    "fmt",
    default="memories",
    show_default=True,
    type=click.Choice(IMPORT_FORMATS),
    help="memories: JSONL, one object per line with 'content' and optional fields. "
    "jsonl-transcript: one message per line (role, content, timestamp, session_id). "
    "claude-code: a Claude Code session .jsonl. longmemeval, locomo: those benchmarks' "
    "JSON files (.gz is fine). See docs/sources.md.",
)
@click.option(
    "--strict", is_flag=True, help="Refuse the whole file, storing nothing, if any line is bad."
)
@pass_ctx
def import_(obj: Ctx, path: str, fmt: str, strict: bool) -> None:
    """Import memories or a conversation transcript from a file (or '-' for standard input).

    Transcripts are stored turn by turn with their session and time; importing the same
    transcript again adds nothing. Every format treats bad lines alike: each is reported on
    standard error with its line number and why, and skipped; the rest is stored, and the
    exit code is 7 when lines were skipped. With --strict a bad line refuses the whole file
    (exit 2, nothing stored). A file with nothing importable is refused too (exit 2).
    Memory fields: docs/memory-fields.md.
    """
    from recalld.interfaces.progress import file_progress
    from recalld.requests import ImportRequest, parse
    from recalld.sources.importer import ImportRefused

    unit = "memories" if fmt == "memories" else "turns"
    with errors():
        source = {"content": sys.stdin.buffer.read()} if path == "-" else {"path": path}
        request = parse(ImportRequest, {"format": fmt, "strict": strict, **source})
        try:
            with (
                obj.engine(create=True) as engine,
                file_progress("importing", obj.as_json, unit) as bar,
            ):
                report = engine.run_import(request, progress=bar)
        except ImportRefused as exc:
            for problem in exc.problems:
                click.echo(f"bad {problem}", err=True)
            raise
    for problem in report.problems:
        click.echo(f"warning: skipped {problem}", err=True)
    for note in report.notes:
        click.echo(f"warning: {note}", err=True)
    if fmt == "memories":
        _memories_summary(obj, report)
    else:
        _transcript_summary(obj, report)
    if report.problems:
        sys.exit(EXIT_SKIPPED_LINES)


def _transcript_summary(obj: Ctx, report: ImportReport) -> None:
    if report.undated:
        click.echo(
            f"warning: {report.undated} of {report.turns} turns have no timestamp: they are "
            "stored undated (search treats them as made at import time)",
            err=True,
        )
    if obj.as_json:
        emit_json(report)
        return
    click.echo(
        f"turns read: {report.turns}, stored: {report.stored}, already present: "
        f"{report.already_present}, skipped lines: {len(report.problems)}"
        + (f", non-conversation lines: {report.skipped}" if report.skipped else "")
    )


def _memories_summary(obj: Ctx, report: ImportReport) -> None:
    summary = {
        "read": report.turns,
        "stored": report.stored,
        "duplicates": report.already_present,
        "skipped_lines": len(report.problems),
    }
    if obj.as_json:
        emit_json(summary)
    else:
        click.echo(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in summary.items()))
