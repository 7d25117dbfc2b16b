"""The SQLite store: one file, WAL, FTS5 BM25 (porter) + trigram, exact vector search."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.errors import StoreError
from recalld.records import Memory, MemoryFilter, Source
from recalld.stores.base import CandidateRequest, ChannelCandidate, StoreStats, Vector
from recalld.stores.sqlite import queries as q
from recalld.stores.sqlite.migrations import APP_ID, SCHEMA_VERSION, migrate
from recalld.stores.sqlite.vectors import VectorMirror

_COLUMNS = (
    "id, content, type, content_hash, event_time, created_at, updated_at, last_accessed_at,"
    " ref_time, access_count, priority, pinned, evergreen, significance, project, scope,"
    " session_id, source_kind, source_path, source_start, source_end, source_ref, tags,"
    " entities, metadata, valid_until, superseded_by, embedding_fingerprint, forgotten_at"
)
_MARKS = ",".join("?" * len(_COLUMNS.split(",")))


def _dt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def _row(memory: Memory) -> tuple[Any, ...]:
    s = memory.source
    return (
        memory.id, memory.content, memory.type, memory.content_hash, q.ts(memory.event_time),
        q.ts(memory.created_at), q.ts(memory.updated_at), q.ts(memory.last_accessed_at),
        q.ts(memory.reference_time), memory.access_count, memory.priority, int(memory.pinned),
        int(memory.evergreen), memory.significance, memory.project, memory.scope,
        memory.session_id, s.kind, s.path, s.line_start, s.line_end, s.ref,
        json.dumps(list(memory.tags)), json.dumps(list(memory.entities)),
        json.dumps(dict(memory.metadata), ensure_ascii=False), q.ts(memory.valid_until),
        memory.superseded_by, memory.embedding_fingerprint, q.ts(memory.forgotten_at),
    )  # fmt: skip


def _memory(r: sqlite3.Row) -> Memory:
    return Memory(
        id=r["id"], content=r["content"], type=r["type"], content_hash=r["content_hash"],
        event_time=_dt(r["event_time"]), created_at=_dt(r["created_at"]) or datetime.now(UTC),
        updated_at=_dt(r["updated_at"]) or datetime.now(UTC),
        last_accessed_at=_dt(r["last_accessed_at"]), access_count=r["access_count"],
        priority=r["priority"], pinned=bool(r["pinned"]), evergreen=bool(r["evergreen"]),
        significance=r["significance"], project=r["project"], scope=r["scope"],
        session_id=r["session_id"],
        source=Source(r["source_kind"], r["source_path"], r["source_start"], r["source_end"],
                      r["source_ref"]),
        tags=tuple(json.loads(r["tags"])), entities=tuple(json.loads(r["entities"])),
        metadata=json.loads(r["metadata"]), valid_until=_dt(r["valid_until"]),
        superseded_by=r["superseded_by"], embedding_fingerprint=r["embedding_fingerprint"],
        forgotten_at=_dt(r["forgotten_at"]),
    )  # fmt: skip


class SQLiteStore:
    """A :class:`~recalld.stores.base.Store` in one SQLite file.

    Args:
        path: the database file, or ``":memory:"``; parent folders are created.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            self._check_path(Path(path))
        try:
            self._db = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            self._db.row_factory = sqlite3.Row
            self._check_foreign()
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            migrate(self._db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{self.path} is not a usable recalld store ({exc}); "
                "point --db at another file, or move this one aside"
            ) from exc
        self._vectors = VectorMirror(None if self.path == ":memory:" else Path(self.path + ".ann"))

    @staticmethod
    def _check_path(path: Path) -> None:
        folder = path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder {folder}: {exc.strerror}") from exc
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise StoreError(f"the store file {path} is not readable and writable by this user")
        if not path.exists() and not os.access(folder, os.W_OK):
            raise StoreError(f"cannot create a store in {folder}: the folder is not writable")

    def _check_foreign(self) -> None:
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
        if not tables:
            return
        app = None
        if "meta" in tables:
            found = self._db.execute("SELECT value FROM meta WHERE key = 'app'").fetchone()
            app = found[0] if found else None
        if app != APP_ID:
            raise StoreError(
                f"{self.path} is an SQLite database of another program, not a recalld store; "
                "refusing to touch it"
            )

    # -- transactions --------------------------------------------------------------------

    def _write(self) -> _Transaction:
        return _Transaction(self._db)

    # -- writes --------------------------------------------------------------------------

    def insert(self, memories: Sequence[Memory], vectors: Vector | None) -> None:
        with self._write():
            for i, memory in enumerate(memories):
                cursor = self._db.execute(
                    f"INSERT INTO memories ({_COLUMNS}) VALUES ({_MARKS})", _row(memory)
                )
                self._write_children(cursor.lastrowid or 0, memory, None if vectors is None
                                     else vectors[i])  # fmt: skip

    def _write_children(self, pk: int, memory: Memory, vector: Vector | None) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO memory_tags VALUES (?, ?)", [(t, pk) for t in memory.tags]
        )
        self._db.executemany(
            "INSERT OR IGNORE INTO memory_entities VALUES (?, ?)",
            [(e, pk) for e in memory.entities],
        )
        if vector is not None:
            self._db.execute(
                "INSERT INTO vectors (pk, vector) VALUES (?, ?)",
                (pk, np.asarray(vector, dtype=np.float32).tobytes()),
            )

    def replace(self, memory: Memory, vector: Vector | None) -> None:
        assignments = ", ".join(f"{c.strip()} = ?" for c in _COLUMNS.split(",")[1:])
        with self._write():
            found = self._db.execute("SELECT pk FROM memories WHERE id = ?", (memory.id,))
            row = found.fetchone()
            if row is None:
                raise StoreError(f"no memory {memory.id} to replace")
            pk = row[0]
            self._db.execute(
                f"UPDATE memories SET {assignments} WHERE pk = ?", (*_row(memory)[1:], pk)
            )
            self._db.execute("DELETE FROM memory_tags WHERE pk = ?", (pk,))
            self._db.execute("DELETE FROM memory_entities WHERE pk = ?", (pk,))
            if vector is not None:
                self._db.execute("DELETE FROM vectors WHERE pk = ?", (pk,))
            self._write_children(pk, memory, vector)

    def forget(self, ids: Sequence[str], *, hard: bool, at: datetime) -> int:
        marks = ",".join("?" * len(ids))
        with self._write():
            if hard:
                cursor = self._db.execute(f"DELETE FROM memories WHERE id IN ({marks})", list(ids))
            else:
                cursor = self._db.execute(
                    f"UPDATE memories SET forgotten_at = ? WHERE id IN ({marks})"
                    " AND forgotten_at IS NULL",
                    [at.timestamp(), *ids],
                )
            return cursor.rowcount

    def record_access(self, ids: Sequence[str], at: datetime) -> None:
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        with self._write():
            self._db.execute(
                f"UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?"
                f" WHERE id IN ({marks})",
                [at.timestamp(), *ids],
            )

    def set_fingerprint(self, fingerprint: str) -> None:
        with self._write():
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('embedding_fingerprint', ?)", (fingerprint,)
            )

    def swap_vectors(self, vectors: Mapping[str, Vector], fingerprint: str) -> None:
        with self._write():
            self._db.execute("DELETE FROM vectors")
            pks = dict(self._db.execute("SELECT id, pk FROM memories").fetchall())
            self._db.executemany(
                "INSERT INTO vectors (pk, vector) VALUES (?, ?)",
                [
                    (pks[i], np.asarray(v, np.float32).tobytes())
                    for i, v in vectors.items()
                    if i in pks
                ],  # fmt: skip
            )
            self._db.execute("UPDATE memories SET embedding_fingerprint = ?", (fingerprint,))
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('embedding_fingerprint', ?)", (fingerprint,)
            )

    # -- reads ---------------------------------------------------------------------------

    def get_fingerprint(self) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'embedding_fingerprint'")
        found = row.fetchone()
        return None if found is None else str(found[0])

    def get_many(self, ids: Sequence[str]) -> list[Memory]:
        found: dict[str, Memory] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for r in self._db.execute(
                f"SELECT {_COLUMNS} FROM memories WHERE id IN ({marks})", chunk
            ):
                found[r["id"]] = _memory(r)
        return [found[i] for i in ids if i in found]

    def find_duplicates(
        self, keys: Sequence[tuple[str, str, str | None, str | None]]
    ) -> dict[tuple[str, str, str | None, str | None], str]:
        wanted = set(keys)
        found: dict[tuple[str, str, str | None, str | None], str] = {}
        hashes = sorted({k[0] for k in keys})
        for start in range(0, len(hashes), 500):
            chunk = hashes[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for r in self._db.execute(
                "SELECT id, content_hash, scope, project, session_id FROM memories"
                f" WHERE content_hash IN ({marks}) AND forgotten_at IS NULL",
                chunk,
            ):
                key = (r[1], r[2], r[3], r[4])
                if key in wanted:
                    found.setdefault(key, r[0])
        return found

    def list(
        self, filters: MemoryFilter, *, limit: int, offset: int = 0, newest_first: bool = True
    ) -> list[Memory]:
        where, params = q.filter_sql(filters)
        order = "DESC" if newest_first else "ASC"
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM memories m WHERE {where}"
            f" ORDER BY m.ref_time {order}, m.pk {order} LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [_memory(r) for r in rows]

    def iter_contents(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        last = 0
        while True:
            rows = self._db.execute(
                "SELECT pk, id, content FROM memories WHERE pk > ? ORDER BY pk LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(r[1], r[2]) for r in rows]

    # -- candidates ----------------------------------------------------------------------

    def candidates(self, request: CandidateRequest) -> dict[str, list[ChannelCandidate]]:
        where, params = q.filter_sql(request.filters)
        out: dict[str, list[ChannelCandidate]] = {}
        if request.semantic_limit and request.query_vector is not None:
            out["semantic"] = self._semantic(request, where, params)
        if request.bm25_limit:
            out["bm25"] = self._bm25(request, where, params)
        if request.entity_limit and request.entities:
            rows = self._db.execute(
                q.entity_sql(where, len(request.entities)),
                [*request.entities, *params, request.entity_limit],
            ).fetchall()
            out["entity"] = _ranked((r[0], float(r[1])) for r in rows)
        if request.temporal_limit:
            out["temporal"] = self._temporal(request, where, params)
        return out

    def _semantic(
        self, request: CandidateRequest, where: str, params: list[object]
    ) -> list[ChannelCandidate]:
        self._vectors.refresh(self._db)
        assert request.query_vector is not None
        mirror = self._vectors
        if mirror.dimension is not None and request.query_vector.shape[-1] != mirror.dimension:
            raise StoreError(
                f"query vector has {request.query_vector.shape[-1]} dimensions, the store's "
                f"vectors have {mirror.dimension}"
            )
        allowed: npt.NDArray[np.bool_] | None = None
        if q.is_trivial(request.filters):
            hidden = np.fromiter((r[0] for r in self._db.execute(
                "SELECT pk FROM memories WHERE forgotten_at IS NOT NULL")), np.int64)  # fmt: skip
            if len(hidden):
                allowed = ~mirror.rows_with(hidden)
        else:
            keep = np.fromiter((r[0] for r in self._db.execute(
                f"SELECT m.pk FROM memories m WHERE {where}", params)), np.int64)  # fmt: skip
            allowed = mirror.rows_with(keep)
        top = mirror.search(request.query_vector, request.semantic_limit, allowed)
        return _ranked(zip(self._ids_for([pk for pk, _ in top]), [s for _, s in top],
                           strict=True))  # fmt: skip

    def _ids_for(self, pks: Sequence[int]) -> list[str]:
        if not pks:
            return []
        marks = ",".join("?" * len(pks))
        found = dict(
            self._db.execute(f"SELECT pk, id FROM memories WHERE pk IN ({marks})", list(pks))
        )
        return [found[pk] for pk in pks]

    def _bm25(
        self, request: CandidateRequest, where: str, params: list[object]
    ) -> list[ChannelCandidate]:
        scored: dict[str, float] = {}
        limit = request.bm25_limit
        if request.terms:
            rows = self._db.execute(
                q.bm25_sql("memories_fts", where), [q.fts_match(request.terms), *params, limit]
            )
            for memory_id, raw in rows:
                scored[memory_id] = abs(raw) / (1.0 + abs(raw))
        grams, short = q.trigram_terms(request.raw_query)
        if grams:
            rows = self._db.execute(
                q.bm25_sql("memories_trigram", where), [q.fts_match(tuple(grams)), *params, limit]
            )
            for memory_id, raw in rows:
                value = abs(raw) / (1.0 + abs(raw))
                scored[memory_id] = max(scored.get(memory_id, 0.0), value)
        if short:
            likes = [f"%{q.escape_like(s)}%" for s in short]
            rows = self._db.execute(q.like_sql(where, len(likes)), [*likes, *params, limit])
            for (memory_id,) in rows:
                scored.setdefault(memory_id, 0.5)
        ordered = sorted(scored.items(), key=lambda kv: -kv[1])[:limit]
        return _ranked(ordered)

    def _temporal(
        self, request: CandidateRequest, where: str, params: list[object]
    ) -> list[ChannelCandidate]:
        window_where, window_params = where, list(params)
        window = request.time_window
        if window is not None:
            if window.start is not None:
                window_where += " AND m.ref_time >= ?"
                window_params.append(window.start.timestamp())
            if window.end is not None:
                window_where += " AND m.ref_time < ?"
                window_params.append(window.end.timestamp())
        rows = self._db.execute(
            q.temporal_sql(window_where, window is not None),
            [*window_params, request.temporal_limit],
        ).fetchall()
        if not rows:
            return []
        newest = rows[0][1]
        # Score: 1 for the newest candidate, halving with each 30 days before it.
        return _ranked((r[0], 0.5 ** ((newest - r[1]) / (30 * 86400))) for r in rows)

    # -- status --------------------------------------------------------------------------

    def stats(self) -> StoreStats:
        one = self._db.execute(
            "SELECT COUNT(*), SUM(forgotten_at IS NOT NULL), COUNT(DISTINCT session_id),"
            " MIN(ref_time), MAX(ref_time) FROM memories"
        ).fetchone()
        by_type = dict(
            self._db.execute(
                "SELECT type, COUNT(*) FROM memories WHERE forgotten_at IS NULL GROUP BY type"
            ).fetchall()
        )
        vectors = self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
        size = 0
        if self.path != ":memory:":
            size = sum(
                os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p)
            )
        return StoreStats(
            path=self.path,
            memories=one[0] - (one[1] or 0),
            forgotten=one[1] or 0,
            with_vectors=vectors,
            fingerprint=self.get_fingerprint(),
            schema_version=SCHEMA_VERSION,
            size_bytes=size,
            by_type=by_type,
            sessions=one[2],
            oldest=_dt(one[3]),
            newest=_dt(one[4]),
        )

    def execute_read(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only query (used by sources to track indexed files)."""
        return [tuple(r) for r in self._db.execute(sql, list(params))]

    def close(self) -> None:
        self._db.close()


def _ranked(pairs: Any) -> list[ChannelCandidate]:
    return [ChannelCandidate(mid, rank, float(score)) for rank, (mid, score) in
            enumerate(pairs, start=1)]  # fmt: skip


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: writers queue on the lock instead of failing."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"the store is locked or read-only: {exc}") from exc

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if kind is None:
            self._db.execute("COMMIT")
        else:
            self._db.execute("ROLLBACK")
