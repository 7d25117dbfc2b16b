"""Indexed source files in a PostgreSQL store (:class:`~recalld.stores.base.SourceIndex`):
the tenant's workspace roots, its files' states, and the swap of a file's chunks.

:class:`SourceFiles` is a part of :class:`~recalld.stores.postgres.store.PostgresStore`
(a base class), using the handle's connections and its write of rows (:class:`Handle`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

import psycopg

from recalld.records import Memory
from recalld.stores import rows as codec
from recalld.stores.base import SourceContext, SourceFile, SourceRoot, Tenancy, Vector
from recalld.stores.postgres.failures import raising_store_errors


class Handle(Protocol):
    """What the source index needs of a store handle."""

    tenancy: Tenancy
    path: str

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    def _insert_rows(
        self, conn: psycopg.Connection[Any], memories: Sequence[Memory], vectors: Vector | None
    ) -> None: ...


@raising_store_errors
class SourceFiles:
    """The tenant's indexed workspaces and files (chunks are memories of the tenant)."""

    def save_source_root(self: Handle, root: SourceRoot) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO source_roots (namespace, path, globs, added_at, indexed_at, name)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (namespace, path) DO UPDATE SET"
                " globs = excluded.globs,"
                " indexed_at = COALESCE(excluded.indexed_at, source_roots.indexed_at),"
                " name = COALESCE(excluded.name, source_roots.name)",
                (
                    self.tenancy.tenant,
                    root.path,
                    json.dumps(list(root.globs)),
                    datetime.now(UTC).timestamp(),
                    codec.ts(root.indexed_at),
                    root.name,
                ),
            )

    def source_roots(self: Handle) -> list[SourceRoot]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT path, globs, indexed_at, name FROM source_roots WHERE namespace = %s"
                " ORDER BY path",
                (self.tenancy.tenant,),
            ).fetchall()
        return [SourceRoot(r[0], tuple(json.loads(r[1])), codec.dt(r[2]), r[3]) for r in rows]

    def source_contexts(self: Handle) -> list[SourceContext]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT root, prefix, context FROM source_contexts WHERE namespace = %s"
                " ORDER BY root, prefix",
                (self.tenancy.tenant,),
            ).fetchall()
        return [SourceContext(r[0], r[1], r[2]) for r in rows]

    def save_source_context(self: Handle, root: str, prefix: str, text: str | None) -> None:
        key = (self.tenancy.tenant, root, prefix)
        with self._conn() as conn:
            if text is None:
                conn.execute(
                    "DELETE FROM source_contexts WHERE namespace = %s AND root = %s"
                    " AND prefix = %s",
                    key,
                )
                return
            conn.execute(
                "INSERT INTO source_contexts (namespace, root, prefix, context)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (namespace, root, prefix)"
                " DO UPDATE SET context = excluded.context",
                (*key, text),
            )

    def remove_source_root(self: Handle, path: str) -> int:
        own = self.tenancy.tenant
        deleted = 0
        with self._conn() as conn:
            owned = conn.execute(
                "SELECT path FROM source_files WHERE namespace = %s AND root = %s", (own, path)
            ).fetchall()
            for (file,) in owned:
                deleted += conn.execute(_DELETE_CHUNKS, (own, file)).rowcount
                conn.execute(_DELETE_TEXT, (own, file))
            conn.execute("DELETE FROM source_files WHERE namespace = %s AND root = %s", (own, path))
            conn.execute(
                "DELETE FROM source_contexts WHERE namespace = %s AND root = %s", (own, path)
            )
            conn.execute("DELETE FROM source_roots WHERE namespace = %s AND path = %s", (own, path))
        return deleted

    def source_texts(self: Handle, paths: Sequence[str]) -> dict[str, str]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT path, text FROM source_texts WHERE namespace = %s AND path = ANY(%s)",
                (self.tenancy.tenant, list(paths)),
            ).fetchall()
        return {r[0]: r[1] for r in rows}

    def save_source_texts(self: Handle, texts: Mapping[str, str]) -> None:
        own = self.tenancy.tenant
        with self._conn() as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO source_texts VALUES (%s, %s, %s) ON CONFLICT (namespace, path)"
                " DO UPDATE SET text = excluded.text",
                [(own, path, text) for path, text in texts.items()],
            )

    def source_files(self: Handle, roots: Sequence[str] | None = None) -> list[SourceFile]:
        sql = (
            "SELECT f.path, f.root, f.size, f.mtime_ns, f.status, f.content_hash, f.chunker,"
            " f.error, f.indexed_at, (SELECT count(*) FROM memories m WHERE"
            " m.namespace = f.namespace AND m.source_kind = 'file' AND m.type = 'chunk'"
            " AND m.source_path = f.path AND m.forgotten_at IS NULL)"
            " FROM source_files f WHERE f.namespace = %s"
        )
        params: list[Any] = [self.tenancy.tenant]
        if roots is not None:
            sql += " AND f.root = ANY(%s)"
            params.append(list(roots))
        with self._conn() as conn:
            rows = conn.execute(sql + " ORDER BY f.path", params).fetchall()
        return [
            SourceFile(
                path=r[0],
                root=r[1],
                size=r[2],
                mtime_ns=r[3],
                status=r[4],
                content_hash=r[5],
                chunker=r[6],
                error=r[7],
                indexed_at=codec.dt(r[8]),
                chunks=r[9],
            )
            for r in rows
        ]

    def save_source_files(self: Handle, files: Sequence[SourceFile]) -> None:
        with self._conn() as conn, conn.cursor() as cur:
            cur.executemany(
                _UPSERT_FILE, [codec.source_file_row(self.tenancy.tenant, f) for f in files]
            )

    def replace_file_chunks(
        self: Handle,
        file: SourceFile,
        memories: Sequence[Memory],
        vectors: Vector | None,
        text: str | None = None,
    ) -> None:
        own = self.tenancy.tenant
        with self._conn() as conn:
            conn.execute(_DELETE_CHUNKS, (own, file.path))
            self._insert_rows(conn, [replace(m, namespace=own) for m in memories], vectors)
            conn.execute(_UPSERT_FILE, codec.source_file_row(own, file))
            conn.execute(_DELETE_TEXT, (own, file.path))
            if text is not None:
                conn.execute("INSERT INTO source_texts VALUES (%s, %s, %s)", (own, file.path, text))

    def remove_source_files(self: Handle, paths: Sequence[str]) -> int:
        deleted = 0
        own = self.tenancy.tenant
        with self._conn() as conn:
            for path in paths:
                deleted += conn.execute(_DELETE_CHUNKS, (own, path)).rowcount
                conn.execute(
                    "DELETE FROM source_files WHERE namespace = %s AND path = %s", (own, path)
                )
                conn.execute(_DELETE_TEXT, (own, path))
        return deleted


_UPSERT_FILE = (
    "INSERT INTO source_files (namespace, path, root, size, mtime_ns, status, content_hash,"
    " chunker, error, indexed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (namespace, path) DO UPDATE SET root = excluded.root, size = excluded.size,"
    " mtime_ns = excluded.mtime_ns, status = excluded.status,"
    " content_hash = excluded.content_hash, chunker = excluded.chunker,"
    " error = excluded.error, indexed_at = excluded.indexed_at"
)
_DELETE_CHUNKS = (
    "DELETE FROM memories WHERE namespace = %s AND source_kind = 'file' AND type = 'chunk'"
    " AND source_path = %s"
)
_DELETE_TEXT = "DELETE FROM source_texts WHERE namespace = %s AND path = %s"
