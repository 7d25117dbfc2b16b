"""The bookkeeping of indexed source files (:class:`~recalld.stores.base.SourceIndex`) in
the SQLite store: roots and files are the tenant's own (``namespace`` = the tenant), and
so are a file's chunks. Each function runs on a connection, inside the store's
transaction where it writes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from recalld.records import Memory
from recalld.stores import rows as codec
from recalld.stores.base import SourceFile, SourceRoot, Tenancy, Vector
from recalld.stores.sqlite import queries as q, writes


def save_root(db: sqlite3.Connection, tenant: str, root: SourceRoot) -> None:
    """Add or update an indexed folder."""
    globs = json.dumps(list(root.globs))
    db.execute(q.UPSERT_ROOT_SQL, (tenant, root.path, globs, _now(), codec.ts(root.indexed_at)))


def roots(db: sqlite3.Connection, tenant: str) -> list[SourceRoot]:
    """The tenant's indexed folders, by path."""
    rows = db.execute(
        "SELECT path, globs, indexed_at FROM source_roots WHERE namespace = ? ORDER BY path",
        (tenant,),
    )
    return [SourceRoot(r[0], tuple(json.loads(r[1])), codec.dt(r[2])) for r in rows]


def files(db: sqlite3.Connection, tenant: str, under: Sequence[str] | None) -> list[SourceFile]:
    """The tenant's indexed files (of the roots ``under``, when given)."""
    rows = db.execute(*q.source_files_sql(tenant, under))
    return [_source_file(r) for r in rows]


def save_files(db: sqlite3.Connection, tenant: str, found: Sequence[SourceFile]) -> None:
    """Add or update the records of these files."""
    db.executemany(q.UPSERT_FILE_SQL, [codec.source_file_row(tenant, f) for f in found])


def replace_chunks(
    db: sqlite3.Connection,
    tenancy: Tenancy,
    file: SourceFile,
    memories: Sequence[Memory],
    vectors: Vector | None,
) -> None:
    """The file's chunks replaced by ``memories``, and its record by ``file``."""
    own = tenancy.tenant
    db.execute(q.DELETE_FILE_CHUNKS_SQL, (own, file.path))
    # A file's chunks live in the tenant's own namespace, like its record.
    writes.insert_rows(db, tenancy, [replace(m, namespace=own) for m in memories], vectors)
    db.execute(q.UPSERT_FILE_SQL, codec.source_file_row(own, file))


def remove_files(db: sqlite3.Connection, tenant: str, paths: Sequence[str]) -> int:
    """The files' records and chunks deleted: how many chunks."""
    deleted = 0
    for path in paths:
        deleted += db.execute(q.DELETE_FILE_CHUNKS_SQL, (tenant, path)).rowcount
        db.execute("DELETE FROM source_files WHERE namespace = ? AND path = ?", (tenant, path))
    return deleted


def _now() -> float:
    return datetime.now(UTC).timestamp()


def _source_file(r: sqlite3.Row) -> SourceFile:
    return SourceFile(
        path=r["path"],
        root=r["root"],
        size=r["size"],
        mtime_ns=r["mtime_ns"],
        status=r["status"],
        content_hash=r["content_hash"],
        chunker=r["chunker"],
        error=r["error"],
        indexed_at=codec.dt(r["indexed_at"]),
        chunks=r["chunks"],
    )
