"""``recalld postgres start|stop`` (a local PostgreSQL server for trying recalld out),
``recalld postgres tenant-index|word-index`` and
``recalld migrate`` (copy a store between backends)."""

from __future__ import annotations

from pathlib import Path

import click

from recalld import local_postgres
from recalld.interfaces.cli import Ctx, emit_json, errors, pass_ctx
from recalld.records import IndexBuild, IndexKind


@click.group()
def postgres() -> None:
    """A local PostgreSQL + pgvector server (needs the postgres extra)."""


@postgres.command()
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=local_postgres.DEFAULT_DIR,
    show_default=True,
    help="The server's data folder (keep it out of home folders).",
)
def start(folder: Path) -> None:
    """Start the server (creating it on first use); prints the application's DSN as the
    last line.

    The application's role (recalld_app) is no superuser, so Row-Level Security walls
    tenants off; the superuser's DSN, printed above it, is for maintenance only.
    Use it with: recalld --db "$(recalld postgres start | tail -1)" ...

    The server's shared_buffers is set once to a quarter of this machine's memory
    (128 MB to 8 GB) unless it was set with ALTER SYSTEM before.
    """
    with errors():
        server = local_postgres.start(folder)
    click.echo(
        f"PostgreSQL with pgvector is running from {folder} (checked: it computes vector "
        "distances and builds an HNSW index on this CPU).",
        err=True,
    )
    click.echo(
        f"superuser DSN (bypasses row-level security: maintenance only, never the "
        f"application): {server.admin_dsn}",
        err=True,
    )
    click.echo(
        f"application DSN (role {local_postgres.APP_ROLE}, row-level security enforced):", err=True
    )
    click.echo(server.dsn)


@postgres.command()
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=local_postgres.DEFAULT_DIR,
    show_default=True,
    help="The server's data folder.",
)
def stop(folder: Path) -> None:
    """Stop the server started with `recalld postgres start`, whatever state it is in.

    A fast shutdown first; a server that does not finish one (a backend that does not
    answer, a recovery that does not end) gets an immediate shutdown, then its processes
    are killed: at most about half a minute.
    """
    with errors():
        how = local_postgres.stop(folder)
    if how is None:
        click.echo(f"no server runs in {folder}")
        return
    said = {
        "fast": "",
        "immediate": " (it did not finish a fast shutdown: immediate shutdown)",
        "killed": " (it did not answer a shutdown: its processes were killed)",
    }
    click.echo(f"stopped the server in {folder}{said[how]}")


@postgres.command("tenant-index")
@click.option("--drop", is_flag=True, help="Remove the tenant's own index instead.")
@pass_ctx
def tenant_index(obj: Ctx, drop: bool) -> None:
    """Give the tenant (--tenant) a vector index of its own rows in a PostgreSQL database
    shared by many tenants.

    Worth it for a tenant of tens of thousands of memories in a database of many more:
    its vector search then costs what its own memories cost and finds the exact nearest
    as often as a store of its own (docs/postgres.md). The build does not block writes;
    it takes about a minute per 100k memories. Store handles opened afterwards use it.
    """
    built = _build(obj, "vectors", drop)
    click.echo(f"{'dropped' if drop else 'built'} {built.name}")


@postgres.command("word-index")
@click.option("--drop", is_flag=True, help="Remove the tenant's word postings instead.")
@pass_ctx
def word_index(obj: Ctx, drop: bool) -> None:
    """Give the tenant (--tenant) word postings: its word searches then score a question's
    words on an index and read only the best memories from the table.

    Worth it from 10,000 memories, in a shared database or one of its own
    (docs/postgres.md); the results stay the same. Where the server has pg_textsearch 1.3
    or later (on a server of your own: the local one loads none), a BM25 index of the
    tenant's words is built too, and from 50,000 memories a search scores only its best
    memories. The write that takes a tenant past 10,000 builds them itself; this
    builds them for a tenant already past it. Writes to the
    memories table wait while it builds (about half a minute per 100k memories); searches
    go on. Store handles use them within a minute, and every write keeps them current.
    """
    built = _build(obj, "words", drop)
    said = f"built {built.entries or 0:,} word postings"
    click.echo("dropped the word postings" if drop else said)


def _build(obj: Ctx, kind: IndexKind, drop: bool) -> IndexBuild:
    """The engine's build (or, ``drop``, removal) of the tenant's ``kind`` index."""
    with errors(), obj.engine() as engine:
        return engine.build_index(kind, drop=drop, progress=lambda said: click.echo(said, err=True))


@click.command()
@click.argument("source")
@click.argument("destination")
@pass_ctx
def migrate(obj: Ctx, source: str, destination: str) -> None:
    """Copy the tenant's memories from SOURCE to DESTINATION without re-embedding.

    Each is an SQLite file or a postgresql:// DSN; the destination's tenant must be empty
    and may not hold another embedder's vectors. The copy is verified by counts and a
    content + vector checksum. The tenant is --tenant (RECALLD_TENANT); a shared namespace
    is copied by naming it as the tenant. Until the copy verifies the destination is marked
    unfinished (status says so; other commands refuse it); run the same command again to
    finish an interrupted copy.
    """
    tenant = obj.overrides.get("tenant") or "default"
    with errors():
        from recalld.migration import migrate_store

        report = migrate_store(source, destination, tenant=tenant)
    if obj.as_json:
        emit_json(report)
        return
    click.echo(
        f"copied {report.memories} memories ({report.with_vectors} with vectors) and "
        f"{report.source_files} indexed files of tenant {report.tenant}; "
        f"checksum {report.checksum} matches"
    )
