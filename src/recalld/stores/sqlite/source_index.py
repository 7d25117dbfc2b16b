"""The bookkeeping of indexed source files (:class:`~recalld.stores.base.SourceIndex`) in
the SQLite store: roots and files are the tenant's own (``namespace`` = the tenant), and
so are a file's chunks. Each function runs on a connection, inside the store's
transaction where it writes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from recalld.records import Memory
from recalld.stores import rows as codec
from recalld.stores.base import SourceContext, SourceFile, SourceRoot, Tenancy, Vector
from recalld.stores.sqlite import queries as q, writes


def save_root(db: sqlite3.Connection, tenant: str, root: SourceRoot) -> None:
    """Add or update an indexed folder."""
    globs = json.dumps(list(root.globs))
    values = (tenant, root.path, globs, _now(), codec.ts(root.indexed_at), root.name)
    db.execute(q.UPSERT_ROOT_SQL, values)


def roots(db: sqlite3.Connection, tenant: str) -> list[SourceRoot]:
    """The tenant's indexed folders, by path."""
    rows = db.execute(
        "SELECT path, globs, indexed_at, name FROM source_roots WHERE namespace = ? ORDER BY path",
        (tenant,),
    )
    return [SourceRoot(r[0], tuple(json.loads(r[1])), codec.dt(r[2]), r[3]) for r in rows]


def contexts(db: sqlite3.Connection, tenant: str) -> list[SourceContext]:
    """The tenant's context lines, by root and prefix."""
    rows = db.execute(
        "SELECT root, prefix, context FROM source_contexts WHERE namespace = ?"
        " ORDER BY root, prefix",
        (tenant,),
    )
    return [SourceContext(r[0], r[1], r[2]) for r in rows]


def save_context(
    db: sqlite3.Connection, tenant: str, root: str, prefix: str, text: str | None
) -> None:
    """Set (or, with ``text`` None, remove) a context line."""
    if text is None:
        db.execute(
            "DELETE FROM source_contexts WHERE namespace = ? AND root = ? AND prefix = ?",
            (tenant, root, prefix),
        )
        return
    db.execute(
        "INSERT OR REPLACE INTO source_contexts (namespace, root, prefix, context)"
        " VALUES (?, ?, ?, ?)",
        (tenant, root, prefix, text),
    )


def remove_root(db: sqlite3.Connection, tenant: str, path: str) -> int:
    """A root forgotten with its files, texts, chunks and context lines: how many chunks."""
    owned = [r["path"] for r in db.execute(*q.source_files_sql(tenant, [path]))]
    deleted = remove_files(db, tenant, owned)
    db.execute("DELETE FROM source_contexts WHERE namespace = ? AND root = ?", (tenant, path))
    db.execute("DELETE FROM source_roots WHERE namespace = ? AND path = ?", (tenant, path))
    return deleted


def texts(db: sqlite3.Connection, tenant: str, paths: Sequence[str]) -> dict[str, str]:
    """The indexed texts of these files, by path."""
    found: dict[str, str] = {}
    for path in dict.fromkeys(paths):
        row = db.execute(
            "SELECT text FROM source_texts WHERE namespace = ? AND path = ?", (tenant, path)
        ).fetchone()
        if row is not None:
            found[path] = row[0]
    return found


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
    text: str | None,
) -> None:
    """The file's chunks replaced by ``memories``, its record by ``file``, its text by
    ``text`` (None: the file keeps no text)."""
    own = tenancy.tenant
    db.execute(q.DELETE_FILE_CHUNKS_SQL, (own, file.path))
    # A file's chunks live in the tenant's own namespace, like its record.
    writes.insert_rows(db, tenancy, [replace(m, namespace=own) for m in memories], vectors)
    db.execute(q.UPSERT_FILE_SQL, codec.source_file_row(own, file))
    db.execute("DELETE FROM source_texts WHERE namespace = ? AND path = ?", (own, file.path))
    if text is not None:
        db.execute("INSERT INTO source_texts VALUES (?, ?, ?)", (own, file.path, text))


def remove_files(db: sqlite3.Connection, tenant: str, paths: Sequence[str]) -> int:
    """The files' records and chunks deleted: how many chunks."""
    deleted = 0
    for path in paths:
        deleted += db.execute(q.DELETE_FILE_CHUNKS_SQL, (tenant, path)).rowcount
        db.execute("DELETE FROM source_files WHERE namespace = ? AND path = ?", (tenant, path))
        db.execute("DELETE FROM source_texts WHERE namespace = ? AND path = ?", (tenant, path))
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


def save_texts(db: sqlite3.Connection, tenant: str, found: Mapping[str, str]) -> None:
    """Keep these files' texts."""
    rows = [(tenant, path, text) for path, text in found.items()]
    db.executemany("INSERT OR REPLACE INTO source_texts VALUES (?, ?, ?)", rows)
