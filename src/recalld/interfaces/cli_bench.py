"""``recalld bench``: run a retrieval benchmark and write its report (a thin adapter).

Parsing, one call to :mod:`recalld.bench.runner`, and writing what it returns; the
measuring and the metrics live in :mod:`recalld.bench`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

import recalld
from recalld.interfaces.cli import CONTEXT_SETTINGS, Ctx, emit_json, errors

ProgressCallback = Callable[[int, int, str], None]


def _shared_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options every benchmark takes."""
    options = [
        click.option("--mode", default="auto", show_default=True,
                     type=click.Choice(["auto", "hybrid", "vector"]),
                     help="Search mode of recalld's own pipeline (baselines fix theirs)."),
        click.option("--baselines/--no-baselines", default=True, show_default=True,
                     help="Also run BM25 only and vector only on the same stores."),
        click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
                     help="Embedding cache folder [default: the user cache dir]."),
        click.option("--depth", default=50, show_default=True,
                     help="Hits per search: the ranking the metrics are computed from."),
        click.option("--budget", "budgets", multiple=True, type=int,
                     help="Context budget in tokens (repeatable) [default: 1000 2000 4000]."),
        click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write the full report (every question) as JSON to this file."),
        click.option("--llm", help="openai:MODEL: run the LLM stages (expansion, auto "
                     "routing) against this model [default: none]."),
        click.option("--llm-base-url", help="The LLM's OpenAI-compatible endpoint."),
        click.option("--reranker", help="onnx:/folder | llm | http:URL[#model] | maxsim: "
                     "run the rerank stage [default: none]."),
        click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
                     help="Write report.md, chart.png and results.json into this folder."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


@click.group(context_settings=CONTEXT_SETTINGS)
def bench() -> None:
    """Measure retrieval quality and speed on public memory benchmarks."""


@bench.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--limit", type=click.IntRange(min=1), help="Score only the first N questions.")
@click.option("--questions", "question_ids", multiple=True,
              help="Question ids to score (comma-separated or repeated).")  # fmt: skip
@click.option("--granularity", default="turn", show_default=True,
              type=click.Choice(["turn", "session"]), help="What one memory is.")  # fmt: skip
@click.option(
    "--roles",
    default="",
    metavar="ROLE,ROLE",
    help="Store only turns of these roles (e.g. 'user', as the official script).",
)
@click.option("--include-abstention", is_flag=True,
              help="Also score '_abs' questions (left out by the official report).")  # fmt: skip
@_shared_options
@click.pass_context
def longmemeval(ctx: click.Context, /, file: Path, limit: int | None,
                question_ids: tuple[str, ...], granularity: str, roles: str,
                include_abstention: bool,
                **shared: Any) -> None:  # fmt: skip
    """Retrieval on a LongMemEval FILE (official schema, plain or .gz JSON).

    Each question gets a fresh store holding only its haystack, one memory per turn, and
    is asked with as_of = its question_date.
    """
    from recalld.bench.runner import run_longmemeval

    ids = [i.strip() for raw in question_ids for i in raw.split(",") if i.strip()]
    _run(ctx, run_longmemeval, file, shared, limit=limit, question_ids=ids,
         granularity=granularity, include_abstention=include_abstention,
         roles=[r.strip() for r in roles.split(",") if r.strip()])  # fmt: skip


@bench.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--limit", type=click.IntRange(min=1),
              help="Use only the first N conversations.")  # fmt: skip
@click.option("--conversations", "conversation_ids", multiple=True,
              help="Conversation sample_ids to use (comma-separated or repeated).")  # fmt: skip
@click.option("--adversarial", is_flag=True,
              help="Also score category 5 (adversarial) questions.")  # fmt: skip
@_shared_options
@click.pass_context
def locomo(ctx: click.Context, /, file: Path, limit: int | None, conversation_ids: tuple[str, ...],
           adversarial: bool, **shared: Any) -> None:  # fmt: skip
    """Retrieval on a LoCoMo FILE: a store per conversation, a memory per turn.

    Questions carry no date: they are asked as of the conversation's last session.
    """
    from recalld.bench.locomo import DEFAULT_CATEGORIES
    from recalld.bench.runner import run_locomo

    ids = [i.strip() for raw in conversation_ids for i in raw.split(",") if i.strip()]
    categories = (*DEFAULT_CATEGORIES, 5) if adversarial else DEFAULT_CATEGORIES
    _run(ctx, run_locomo, file, shared, limit=limit, conversation_ids=ids,
         categories=categories)  # fmt: skip


def _run(ctx: click.Context, runner: Callable[..., dict[str, Any]], file: Path,
         shared: dict[str, Any], **specific: Any) -> None:  # fmt: skip
    """Resolve settings, run, write the outputs; every benchmark command ends here."""
    from recalld.bench.runner import DEFAULT_BUDGETS

    root = ctx.find_object(Ctx)
    quiet = bool(root and root.as_json)
    with errors():
        models = {k: shared.pop(k) for k in ("llm", "llm_base_url", "reranker")}
        overrides = {**(root.overrides if root else {}),
                     **{k: v for k, v in models.items() if v is not None}}  # fmt: skip
        settings = recalld.load_settings(overrides, config_file=root.config_file if root else None)
        json_path, report_dir = shared.pop("json_path"), shared.pop("report_dir")
        budgets = tuple(shared.pop("budgets")) or DEFAULT_BUDGETS
        with _progress(f"{ctx.info_name}", quiet) as progress:
            report = runner(file, settings=settings, budgets=budgets, progress=progress,
                            **shared, **specific)  # fmt: skip
        report = {"command": _command_line(ctx), **report}
        _write(report, json_path, report_dir, quiet)


def _write(report: dict[str, Any], json_path: Path | None, report_dir: Path | None,
           quiet: bool) -> None:  # fmt: skip
    from recalld.bench.report import markdown_report, write_json, write_report

    written = []
    if json_path is not None:
        write_json(report, json_path)
        written.append(json_path)
    if report_dir is not None:
        written += write_report(report, report_dir)
    if quiet:
        emit_json({k: v for k, v in report.items() if k != "probes"})
        return
    click.echo(markdown_report(report))
    for path in written:
        click.echo(f"wrote {path}")


@contextmanager
def _progress(label: str, quiet: bool) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on stderr, advanced per question."""
    if quiet:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    if not console.is_terminal:
        yield _log_lines(label)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(label, total=None)

        def advance(step: int, total: int, case: str) -> None:
            bar.update(task, total=total, advance=step, description=f"{label} {case}")

        yield advance


def _log_lines(label: str) -> ProgressCallback:
    """Progress as plain lines on stderr, for logs (a bar only draws on a terminal)."""
    done = 0

    def advance(step: int, total: int, case: str) -> None:
        nonlocal done
        done += step
        click.echo(f"{label}: {done}/{total} ({case})", err=True)

    return advance


def _command_line(ctx: click.Context) -> str:
    """The command as typed, rebuilt from the parsed parameters (defaults left out)."""
    parts = ctx.command_path.split()
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if isinstance(param, click.Argument):
            parts.append(str(value))
        elif (
            isinstance(param, click.Option)
            and value not in (None, ())
            and (value != param.get_default(ctx))
        ):
            flag = param.opts[0]
            if param.is_flag and not param.secondary_opts:
                parts.append(flag)
            elif param.is_flag:
                parts.append(flag if value else param.secondary_opts[0])
            elif isinstance(value, tuple):
                parts += [x for v in value for x in (flag, str(v))]
            else:
                parts += [flag, str(value)]
    return shlex.join(parts)


def _attach_scale() -> None:
    """``recalld bench scale`` lives in its own module (the synthetic-corpus benchmark)."""
    from recalld.interfaces.cli_scale import scale

    bench.add_command(scale)


_attach_scale()
