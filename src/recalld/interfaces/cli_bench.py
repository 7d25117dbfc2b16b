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
from recalld.errors import InvalidInputError
from recalld.interfaces.cli import CONTEXT_SETTINGS, Ctx, emit_json, errors

ProgressCallback = Callable[[int, int, str], None]


EMBEDDER_OPTION = click.option(
    "--embedder",
    help="local | multilingual | onnx:/model/folder | openai:MODEL: the embedder "
    "of every store and query [default: the global --embedder setting].",
)
"""Every benchmark can be re-run with another model (the report records which)."""

_MODEL_OPTIONS = [
    EMBEDDER_OPTION,
    click.option(
        "--llm",
        help="openai:MODEL: run the LLM stages (expansion, auto "
        "routing) against this model [default: none].",
    ),
    click.option("--llm-base-url", help="The LLM's OpenAI-compatible endpoint."),
    click.option(
        "--reranker",
        help="onnx:/folder | llm | http:URL[#model] | maxsim: "
        "run the rerank stage [default: none].",
    ),
]
"""The optional model stages' options, which every benchmark of retrieval quality takes."""


_RUN_OPTIONS = [
    click.option(
        "--cache-dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Embedding cache folder [default: the user cache dir].",
    ),
    click.option(
        "--json",
        "json_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the full report (every question) as JSON to this file.",
    ),
    *_MODEL_OPTIONS,
    click.option(
        "--report",
        "report_dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Write report.md, chart.png and results.json into this folder.",
    ),
]
"""Options every benchmark of retrieval quality takes: caches, outputs, models."""


def _with(options: list[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator adding ``options`` to a command, in that order in its help."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


_shared_options = _with(
    [
        click.option(
            "--mode",
            default="auto",
            show_default=True,
            type=click.Choice(["auto", "hybrid", "vector"]),
            help="Search mode of recalld's own pipeline (baselines fix theirs).",
        ),
        click.option(
            "--baselines/--no-baselines",
            default=True,
            show_default=True,
            help="Also run BM25 only and vector only on the same stores.",
        ),
        click.option(
            "--depth",
            default=50,
            show_default=True,
            help="Hits per search: the ranking the metrics are computed from.",
        ),
        click.option(
            "--budget",
            "budgets",
            multiple=True,
            type=int,
            help="Context budget in tokens (repeatable) [default: 1000 2000 4000].",
        ),
        *_RUN_OPTIONS,
    ]
)
"""Options of the conversation benchmarks (LongMemEval, LoCoMo)."""

_paired_options = _with(
    [
        click.option(
            "--preset",
            type=click.Choice(list(recalld.PRESETS)),
            help="recalld's pipeline as this preset [default: the configured one].",
        ),
        click.option(
            "--set",
            "changes",
            multiple=True,
            metavar="NAME=VALUE",
            help="Also run a variant: the default with this retrieval setting changed "
            "(repeatable; VALUE is JSON, e.g. event_boost=1.0 or "
            '\'channels=["semantic","bm25"]\'); paired against the default.',
        ),
        click.option(
            "--baselines/--no-baselines",
            default=True,
            show_default=True,
            help="Also run plain RRF, BM25 only and vector only on the same stores.",
        ),
        *_RUN_OPTIONS,
    ]
)
"""Options of the benchmarks that pair recalld's pipeline (and a variant) with plain RRF."""


@click.group(context_settings=CONTEXT_SETTINGS)
def bench() -> None:
    """Measure retrieval quality and speed on public memory benchmarks."""


@bench.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--limit", type=click.IntRange(min=1), help="Score only the first N questions.")
@click.option(
    "--questions",
    "question_ids",
    multiple=True,
    help="Question ids to score (comma-separated or repeated).",
)
@click.option(
    "--granularity",
    default="turn",
    show_default=True,
    type=click.Choice(["turn", "session"]),
    help="What one memory is.",
)
@click.option(
    "--roles",
    default="",
    metavar="ROLE,ROLE",
    help="Store only turns of these roles (e.g. 'user', as the official script).",
)
@click.option(
    "--include-abstention",
    is_flag=True,
    help="Also score '_abs' questions (left out by the official report).",
)
@_shared_options
@click.pass_context
def longmemeval(
    ctx: click.Context,
    /,
    file: Path,
    limit: int | None,
    question_ids: tuple[str, ...],
    granularity: str,
    roles: str,
    include_abstention: bool,
    **shared: Any,
) -> None:
    """Retrieval on a LongMemEval FILE (official schema, plain or .gz JSON).

    Each question gets a fresh store holding only its haystack, one memory per turn, and
    is asked with as_of = its question_date.
    """
    from recalld.bench.runner import run_longmemeval

    ids = [i.strip() for raw in question_ids for i in raw.split(",") if i.strip()]
    _run(
        ctx,
        run_longmemeval,
        file,
        shared,
        limit=limit,
        question_ids=ids,
        granularity=granularity,
        include_abstention=include_abstention,
        roles=[r.strip() for r in roles.split(",") if r.strip()],
    )


@bench.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--limit", type=click.IntRange(min=1), help="Use only the first N conversations.")
@click.option(
    "--conversations",
    "conversation_ids",
    multiple=True,
    help="Conversation sample_ids to use (comma-separated or repeated).",
)
@click.option("--adversarial", is_flag=True, help="Also score category 5 (adversarial) questions.")
@_shared_options
@click.pass_context
def locomo(
    ctx: click.Context,
    /,
    file: Path,
    limit: int | None,
    conversation_ids: tuple[str, ...],
    adversarial: bool,
    **shared: Any,
) -> None:
    """Retrieval on a LoCoMo FILE: a store per conversation, a memory per turn.

    Questions carry no date: they are asked as of the conversation's last session.
    """
    from recalld.bench.locomo import DEFAULT_CATEGORIES
    from recalld.bench.runner import run_locomo

    ids = [i.strip() for raw in conversation_ids for i in raw.split(",") if i.strip()]
    categories = (*DEFAULT_CATEGORIES, 5) if adversarial else DEFAULT_CATEGORIES
    _run(ctx, run_locomo, file, shared, limit=limit, conversation_ids=ids, categories=categories)


@bench.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--scenarios",
    "scenario_ids",
    multiple=True,
    help="Scenario ids to run (comma-separated or repeated).",
)
@click.option("--limit", type=click.IntRange(min=1), help="Run only the first N scenarios.")
@_paired_options
@click.pass_context
def workloads(
    ctx: click.Context,
    /,
    file: Path,
    scenario_ids: tuple[str, ...],
    limit: int | None,
    preset: str | None,
    changes: tuple[str, ...],
    **shared: Any,
) -> None:
    """Retrieval on an agent-memory workloads FILE (benchmarks/workloads/FORMAT.md).

    Each scenario gets a fresh store filled as a user would (add_many for its memories and
    its background pools, index for its markdown files); every query is asked with limit
    10 of recalld's pipeline and of plain RRF, BM25 only and vector only. Reports hit@1/5/10,
    mrr@10, all@10 and current_first overall, per scenario kind and per query kind, and the
    paired wins and losses against plain RRF.
    """
    from recalld.bench.workloads_run import run_workloads

    ids = [i.strip() for raw in scenario_ids for i in raw.split(",") if i.strip()]
    with errors():
        variant = dict(_setting(raw) for raw in changes)
    _run(
        ctx,
        run_workloads,
        file,
        shared,
        scenario_ids=ids,
        limit=limit,
        preset=preset,
        variant=variant or None,
    )


@bench.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--split",
    default="test",
    show_default=True,
    type=click.Choice(["train", "test", "dev"]),
    help="The judgements to score: qrels/SPLIT.tsv.",
)
@click.option("--limit", type=click.IntRange(min=1), help="Score only the first N judged queries.")
@click.option(
    "--queries",
    "query_ids",
    multiple=True,
    help="Query ids to score (comma-separated or repeated).",
)
@click.option(
    "--depth",
    default=100,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Hits per search: the ranking the metrics are computed from.",
)
@_paired_options
@click.pass_context
def beir(
    ctx: click.Context,
    /,
    folder: Path,
    split: str,
    limit: int | None,
    query_ids: tuple[str, ...],
    preset: str | None,
    changes: tuple[str, ...],
    **shared: Any,
) -> None:
    """Retrieval on a document collection in BEIR's layout (e.g. SciFact, NFCorpus).

    FOLDER holds corpus.jsonl (_id, title, text), queries.jsonl (_id, text) and
    qrels/SPLIT.tsv. Every document goes into one store through add_many (title, a blank
    line, text; its _id as the memory id); every judged query is asked of recalld's
    pipeline and of plain RRF, BM25 only and vector only. Reports nDCG@10 (graded),
    recall@100 and MRR@10, and the paired wins and losses against plain RRF.
    """
    from recalld.bench.beir import run_beir

    ids = [i.strip() for raw in query_ids for i in raw.split(",") if i.strip()]
    with errors():
        variant = dict(_setting(raw) for raw in changes)
    _run(
        ctx,
        run_beir,
        folder,
        shared,
        split=split,
        limit=limit,
        query_ids=ids,
        preset=preset,
        variant=variant or None,
    )


def _setting(raw: str) -> tuple[str, Any]:
    """``NAME=VALUE`` with VALUE read as JSON when it is JSON, else as text."""
    import json

    name, sep, value = raw.partition("=")
    if not sep or not name.strip():
        raise recalld.InvalidInputError(f"--set expects NAME=VALUE, got {raw!r}")
    try:
        parsed: Any = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return name.strip(), tuple(parsed) if isinstance(parsed, list) else parsed


@bench.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--limit",
    default=1500,
    show_default=True,
    type=click.IntRange(min=1),
    help="Texts taken from each FILE (its first N turns or chunks).",
)
@click.option(
    "--generated",
    default=None,
    type=click.IntRange(min=0),
    help="Also measure N generated abstract-length texts [default: 300 when no "
    "FILE is given, else 0].",
)
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Times each path runs, alternating; rates and ratios are medians.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report as JSON to this file.",
)
@EMBEDDER_OPTION
@click.pass_context
def ingest(
    ctx: click.Context,
    /,
    files: tuple[Path, ...],
    limit: int,
    generated: int | None,
    rounds: int,
    json_path: Path | None,
    embedder: str | None,
) -> None:
    """Storage speed: add_many against the bare model on the same texts, in one run.

    Each FILE is a LoCoMo or LongMemEval JSON file (its turns), a .md file or a folder
    (its markdown chunks). Reports texts/s and tokens/s of the model alone on the texts
    sorted by length, of add_many (fresh store, embedding cache off), of add_many with
    reply context (turns), and of the model fed in input order; with the machine's load.
    """
    from recalld.bench.ingest import generated_abstracts, load_corpus, markdown_table, run_ingest
    from recalld.bench.report import write_json

    root = ctx.find_object(Ctx)
    quiet = bool(root and root.as_json)
    with errors():
        overrides = {
            **(root.overrides if root else {}),
            **({"embedder": embedder} if embedder else {}),
        }
        settings = recalld.load_settings(overrides, config_file=root.config_file if root else None)
        corpora = [load_corpus(path, limit) for path in files]
        count = (0 if files else 300) if generated is None else generated
        if count:
            corpora.append(generated_abstracts(count))
        if not corpora:
            raise InvalidInputError("nothing to measure: give a FILE or --generated N")
        with _progress("ingest", quiet) as progress:
            report = run_ingest(corpora, settings, rounds=rounds, progress=progress)
        report = {"command": _command_line(ctx), **report}
    if json_path is not None:
        write_json(report, json_path)
    if quiet:
        emit_json(report)
        return
    click.echo(markdown_table(report))
    if json_path is not None:
        click.echo(f"wrote {json_path}")


def _run(
    ctx: click.Context,
    runner: Callable[..., dict[str, Any]],
    file: Path,
    shared: dict[str, Any],
    **specific: Any,
) -> None:
    """Resolve settings, run, write the outputs; every benchmark command ends here."""
    from recalld.bench.runner import DEFAULT_BUDGETS

    root = ctx.find_object(Ctx)
    quiet = bool(root and root.as_json)
    with errors():
        models = {k: shared.pop(k, None) for k in ("embedder", "llm", "llm_base_url", "reranker")}
        overrides = {
            **(root.overrides if root else {}),
            **{k: v for k, v in models.items() if v is not None},
        }
        settings = recalld.load_settings(overrides, config_file=root.config_file if root else None)
        json_path, report_dir = shared.pop("json_path"), shared.pop("report_dir")
        if "budgets" in shared:
            shared["budgets"] = tuple(shared["budgets"]) or DEFAULT_BUDGETS
        with _progress(f"{ctx.info_name}", quiet) as progress:
            report = runner(file, settings=settings, progress=progress, **shared, **specific)
        report = {"command": _command_line(ctx), **report}
        _write(report, json_path, report_dir, quiet)


def _write(
    report: dict[str, Any], json_path: Path | None, report_dir: Path | None, quiet: bool
) -> None:
    from recalld.bench.report import markdown_report, write_json, write_report
    from recalld.interfaces.progress import tell_written

    written: list[Path] = []
    skipped: list[str] = []
    if json_path is not None:
        write_json(report, json_path)
        written.append(json_path)
    if report_dir is not None:
        paths, skipped = write_report(report, report_dir)
        written += paths
    if quiet:
        emit_json({k: v for k, v in report.items() if k != "probes"})
    else:
        click.echo(markdown_report(report))
    tell_written(written, skipped, quiet)


@contextmanager
def _progress(label: str, quiet: bool) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on stderr, advanced per question."""
    if quiet:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, TimeElapsedColumn

    from recalld.interfaces.progress import bar_columns

    console = Console(stderr=True)
    if not console.is_terminal:
        yield _log_lines(label)
        return
    columns = (*bar_columns("{task.description}", "steps"), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(label, total=None)

        def advance(step: int, total: int, case: str) -> None:
            bar.update(task, total=total, advance=step, description=f"{label} {case}")

        yield advance


def _log_lines(label: str) -> ProgressCallback:
    """Progress as plain lines on stderr, for logs (a bar only draws on a terminal), with
    the rate so far and the time it leaves to go."""
    import time

    done = 0
    started = time.monotonic()

    def advance(step: int, total: int, case: str) -> None:
        nonlocal done
        done += step
        rate = done / max(time.monotonic() - started, 1e-9)
        pace = f"{rate:.1f}/s" if rate >= 1 else f"{1 / rate:.0f} s each"
        left = f", {(total - done) / rate:.0f} s left" if total >= done else ""
        click.echo(f"{label}: {done}/{total} ({case}; {pace}{left})", err=True)

    return advance


def _command_line(ctx: click.Context) -> str:
    """The command as typed, rebuilt from the parsed parameters (defaults left out)."""
    parts = ctx.command_path.split()
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if isinstance(param, click.Argument):
            parts += [str(v) for v in value] if isinstance(value, tuple) else [str(value)]
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
