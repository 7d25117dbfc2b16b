"""``recalld postgres start|stop``: a local PostgreSQL server for trying recalld out."""

from __future__ import annotations

from pathlib import Path

import click

from recalld import local_postgres
from recalld.interfaces.cli import errors


@click.group()
def postgres() -> None:
    """A local PostgreSQL + pgvector server (needs the postgres extra)."""


@postgres.command()
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              default=local_postgres.DEFAULT_DIR, show_default=True,
              help="The server's data folder (keep it out of home folders).")  # fmt: skip
def start(folder: Path) -> None:
    """Start the server (creating it on first use); prints its DSN as the last line.

    Use it with: recalld --db "$(recalld postgres start | tail -1)" ...
    """
    with errors():
        dsn = local_postgres.start(folder)
    click.echo(f"PostgreSQL with pgvector is running from {folder}; its DSN:", err=True)
    click.echo(dsn)


@postgres.command()
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              default=local_postgres.DEFAULT_DIR, show_default=True,
              help="The server's data folder.")  # fmt: skip
def stop(folder: Path) -> None:
    """Stop the server started with `recalld postgres start`."""
    with errors():
        stopped = local_postgres.stop(folder)
    click.echo(f"stopped the server in {folder}" if stopped else f"no server runs in {folder}")
