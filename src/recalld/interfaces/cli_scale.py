"""``recalld bench scale``: parse options, run :func:`recalld.bench.scale.run_scale`, print."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from recalld.errors import RecalldError


@click.command("scale")
@click.option(
    "--sizes",
    default="10000,100000,1000000",
    show_default=True,
    help="Corpus sizes, comma separated (10k and 1M forms work too).",
)
@click.option("--queries", default=50, show_default=True, help="Questions timed per mode.")
@click.option(
    "--workdir",
    default="scale-bench",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where stores and caches are kept.",
)
@click.option(
    "--data",
    default="../shared/benchmarks",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Holds longmemeval/longmemeval_s.json.gz, locomo/locomo.json.",
)
@click.option(
    "--embedder",
    help="Embedder that embeds the pool and every query [default: the global --embedder setting].",
)
@click.option(
    "--pool",
    "pool_size",
    default=3000,
    show_default=True,
    help="Real snippets embedded; memories are pairs of them.",
)
@click.option("--seed", default=7, show_default=True)
@click.option(
    "--backends",
    default="sqlite",
    show_default=True,
    help="Backends to build and search at every size: sqlite, postgres or both (comma separated).",
)
@click.option(
    "--postgres",
    "postgres_dsn",
    metavar="DSN",
    help="Admin DSN of the PostgreSQL server for the postgres backend (one "
    "database recalld_scale_<size> per size); `recalld postgres start` prints "
    "one.",
)
@click.option(
    "--postgres-role",
    default="recalld_app",
    show_default=True,
    help="The role PostgreSQL's searches and load connect as: the application's, as a "
    "user's server does (the tenant wall binds it; made and granted the tables when "
    "missing); an empty value searches as the --postgres DSN's own user.",
)
@click.option(
    "--clients",
    default="8,32",
    show_default=True,
    help="Client counts of the load through `recalld serve` on each store, comma "
    "separated; 0 skips the load.",
)
@click.option(
    "--workers",
    default="1",
    show_default=True,
    help="Worker processes of `recalld serve` under the load (--workers), comma separated: "
    "one server per count on the same store, their runs taking turns.",
)
@click.option(
    "--load-rounds",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many times every client count runs on every worker count, in turns.",
)
@click.option(
    "--load-seconds", default=10.0, show_default=True, help="How long each client count runs."
)
@click.option(
    "--p99-ms",
    default=150.0,
    show_default=True,
    help="Then find the highest rate of searches the server holds at the "
    "most clients with p99 within this many ms (four more runs); 0 skips "
    "it.",
)
@click.option("--rebuild", is_flag=True, help="Rebuild stores a previous run left in --workdir.")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="Write scale.md, scale.png (latency vs size) and scale.json here.",
)
@click.pass_context
def scale(
    ctx: click.Context,
    sizes: str,
    queries: int,
    workdir: str,
    data: str,
    embedder: str | None,
    pool_size: int,
    seed: int,
    backends: str,
    postgres_dsn: str | None,
    postgres_role: str,
    clients: str,
    workers: str,
    load_rounds: int,
    load_seconds: float,
    p99_ms: float,
    rebuild: bool,
    as_json: bool,
    report_dir: str | None,
) -> None:
    """Time builds and searches on synthetic stores of growing size (from real turns)."""
    from recalld import load_settings
    from recalld.bench import scale_corpus, scale_report
    from recalld.bench.scale import (
        ScaleOptions,
        parse_clients,
        parse_sizes,
        parse_workers,
        run_scale,
    )
    from recalld.interfaces.cli import Ctx
    from recalld.interfaces.progress import tell_written

    root = ctx.find_object(Ctx)
    try:
        spec = embedder or (
            load_settings(root.overrides, config_file=root.config_file).embedder
            if root
            else "local"
        )
        options = ScaleOptions(
            sizes=parse_sizes(sizes),
            queries=queries,
            workdir=Path(workdir),
            embedder=spec,
            pool_size=pool_size,
            seed=seed,
            rebuild=rebuild,
            postgres=postgres_dsn,
            postgres_role=postgres_role,
            clients=parse_clients(clients),
            workers=parse_workers(workers),
            load_rounds=load_rounds,
            load_seconds=load_seconds,
            p99_ms=p99_ms,
            backends=tuple(b.strip() for b in backends.split(",") if b.strip()),
        )
        source = scale_corpus.read_sources(Path(data))
        with _progress_bar(enabled=not as_json) as progress:
            report = run_scale(options, source, progress)
        written = scale_report.write(report, Path(report_dir)) if report_dir else None
    except RecalldError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(scale_report.markdown(report))
    if written:
        tell_written(written.paths, written.skipped, as_json)


class _progress_bar:  # noqa: N801 - used as a context manager, reads like one
    """A rich progress bar fed by ``progress(phase, done, total)`` calls (stderr)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __enter__(self) -> _progress_bar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._bar = Progress(
                "{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._bar.start()
            self._task = self._bar.add_task("starting", total=None)
        return self

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if phase != self._bar.tasks[-1].description:
            self._bar.remove_task(self._task)
            self._task = self._bar.add_task(phase, total=None)
        self._bar.update(self._task, completed=done, total=total or None)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._bar.stop()
