"""The SQLite store: one file, WAL, FTS5 BM25 (porter) + trigram, exact vector search."""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from recalld import threads
from recalld.errors import EmbedderMismatchError, NotFoundError, StoreError
from recalld.records import ApiKey, Memory, MemoryFilter
from recalld.stores import rows as codec
from recalld.stores.base import (
    CandidateRequest,
    ChannelCandidate,
    DedupKey,
    SearchRows,
    SourceFile,
    SourceRoot,
    StoreStats,
    Tenancy,
    Vector,
    already_stored,
    compose_search_rows,
    day_counts,
    guard_public_methods,
    migration_key,
    neighbors_in_sessions,
)
from recalld.stores.sqlite import opening, queries as q, readers
from recalld.stores.sqlite.locking import LOCK_WAIT_S
from recalld.stores.sqlite.migrations import SCHEMA_VERSION
from recalld.stores.sqlite.vector_index import older_build
from recalld.stores.sqlite.vector_reads import VectorReads

log = logging.getLogger("recalld")

_COLUMNS = codec.COLUMNS
_dt = codec.dt
_MARKS = ",".join("?" * len(_COLUMNS.split(",")))
PARALLEL_READS_MIN_ROWS = 50_000
"""From this many rows (the largest ``pk``) a search reads the word channels on a second
thread (:meth:`SQLiteStore.parallel_reads`) while the machine is not busy: BM25 then takes
about as long as embedding the query on one thread, while on a small store it takes a
fraction of a millisecond and embedding on every core is the faster."""


@functools.lru_cache(maxsize=4096)
def _json_tuple(text: str) -> tuple[Any, ...]:
    """Tags and entities: immutable once parsed, so one parse serves every row that has
    the same list (many do: ``["user"]``, the same few entities)."""
    return () if text == "[]" else tuple(json.loads(text))


@functools.lru_cache(maxsize=4096)
def _flat_json(text: str) -> tuple[tuple[str, Any], ...] | None:
    """A metadata object's items when every value is a scalar (most rows: ``{"role":
    "user"}``), else None; cached, since a search decodes a hundred rows that share a few."""
    value = json.loads(text)
    flat = isinstance(value, dict) and all(
        v is None or isinstance(v, str | int | float | bool) for v in value.values()
    )
    return tuple(value.items()) if flat else None


def _metadata(text: str) -> dict[str, Any]:
    """A fresh dict each row (callers may change it); nested values parsed anew."""
    if text == "{}":
        return {}
    items = _flat_json(text)
    return dict(items) if items is not None else dict(json.loads(text))


_VALUES = codec.Values(
    list_out=lambda items: json.dumps(list(items)), list_in=_json_tuple,
    mapping_out=lambda mapping: json.dumps(dict(mapping), ensure_ascii=False),
    mapping_in=_metadata,
)  # fmt: skip
"""Lists and mappings as JSON text (tags, entities, metadata)."""


def _row(memory: Memory, namespace: str, position: int | None) -> tuple[Any, ...]:
    return codec.encode(memory, namespace, position, _VALUES)


def _memory(r: Sequence[Any]) -> Memory:
    return codec.decode(r, _VALUES)


@contextmanager
def _sqlite_call(store: Any) -> Iterator[None]:
    """One public call: SQLite failures reach callers as :class:`StoreError` (a file damaged
    after it was opened, or a lock held past the timeout, gives one clear error: exit code
    4 in the CLI), and calls on the store's connection are serialised."""
    with _sqlite_errors(store.path), store._serial:
        yield


_raising_store_errors = guard_public_methods(_sqlite_call)


@contextmanager
def _sqlite_errors(path: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "malformed" in text or "not a database" in text:
            hint = "the file is damaged: restore a backup, or move it aside and start a new store"
        elif "locked" in text or "busy" in text:
            hint = "another process holds the store's write lock; try again"
        else:
            hint = "check the file, its folder and the free disk space"
        raise StoreError(f"the store {path} failed ({text}); {hint}") from exc


@_raising_store_errors
class SQLiteStore:
    """A :class:`~recalld.stores.base.Store` in one SQLite file.

    Every query is confined to the namespaces of ``tenancy`` (the tenant's own and the
    shared ones it is granted): another tenant's memory is, to this handle, an unknown id.

    Args:
        path: the database file, or ``":memory:"``; parent folders are created.
        tenancy: whose memories this handle reaches (default: the default tenant alone).
    """

    def __init__(self, path: Path | str, tenancy: Tenancy | None = None) -> None:
        self.path = str(path)
        self.tenancy = tenancy or Tenancy()
        self._visible = self.tenancy.visible
        self._access = (opening.Access(self.path, False, None) if self.path == ":memory:"
                        else opening.prepare(Path(path)))  # fmt: skip
        # One connection per thread (a server calls the store from many); an in-memory
        # database exists only in its one connection, so its calls take turns instead.
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._serial: AbstractContextManager[Any] = (
            threading.RLock() if self.path == ":memory:" else nullcontext()
        )
        first = self._connect(configure=False)
        try:
            self._refusal = opening.setup(first, self._access, self.path)
            """Why writes are refused (a read-only file, a newer schema), or None."""
            self._configure(first)
        except StoreError:
            first.close()
            raise
        except sqlite3.DatabaseError as exc:
            first.close()
            raise StoreError(
                f"{self.path} is not a usable recalld store ({exc}); "
                "point --db at another file, or move this one aside"
            ) from exc
        self.vector_reads = VectorReads(self.path, lambda: self._db, self._visible)
        """The readers that hold state: the vector mirror, the saved ANN index, the word
        engines."""
        self._readers: dict[str, readers.Reader] = {
            **readers.READERS,
            **self.vector_reads.channel_readers,
        }
        """One reader per channel (recalld.retrieval.channels): all of them."""
        self.channels = frozenset(self._readers)

    def _connect(self, configure: bool = True) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self._access.target, timeout=LOCK_WAIT_S, isolation_level=None,
                                 check_same_thread=False, uri=self._access.uri)  # fmt: skip
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store file {self.path}: {exc}") from exc
        db.row_factory = sqlite3.Row
        if configure:
            self._configure(db)
        self._local.db = db
        with self._connections_lock:
            self._connections.append(db)
        return db

    @staticmethod
    def _configure(db: sqlite3.Connection) -> None:
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")

    @property
    def _db(self) -> sqlite3.Connection:
        """This thread's connection (opened on its first call)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connections[0] if self.path == ":memory:" else self._connect()
            self._local.db = db
        return db

    # -- transactions --------------------------------------------------------------------

    def _write(self) -> _Transaction:
        if self._refusal is not None:
            raise StoreError(self._refusal)
        return _Transaction(self._db)

    @contextmanager
    def _write_words(self) -> Iterator[None]:
        """A write that may change memories' words: the transaction, then each word engine
        brought up to date (the word index is built once the store is large enough; see
        word_index). The write stands when that fails: the log keeps what it lacks."""
        with self._write():
            yield
        for engine in self.vector_reads.word_engines:
            engine.after_write(self._db)

    # -- writes --------------------------------------------------------------------------

    def insert(self, memories: Sequence[Memory], vectors: Vector | None) -> None:
        with self._write_words():
            self._insert_rows(memories, vectors)

    def insert_unique(
        self, memories: Sequence[Memory], vectors: Vector | None, by_content: bool = True
    ) -> dict[str, str]:
        with self._write_words():  # BEGIN IMMEDIATE: one writer at a time, across processes
            found = already_stored(memories, self.get_many, self.find_duplicates, by_content)
            keep = [i for i, match in enumerate(found) if match is None]
            self._insert_rows([memories[i] for i in keep],
                              None if vectors is None else np.asarray(vectors)[keep])  # fmt: skip
        return {m.id: match for m, match in zip(memories, found, strict=True) if match}

    def _insert_rows(self, memories: Sequence[Memory], vectors: Vector | None) -> None:
        namespaces = [self.tenancy.namespace_for(m.namespace) for m in memories]
        for i, (memory, namespace) in enumerate(zip(memories, namespaces, strict=True)):
            row = _row(memory, namespace, self._position(memory, namespace))
            cursor = self._db.execute(f"INSERT INTO memories ({_COLUMNS}) VALUES ({_MARKS})", row)
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

    def _position(self, memory: Memory, namespace: str) -> int | None:
        """The memory's given place in its session, else the place after the session's last."""
        if memory.position is not None or memory.session_id is None:
            return memory.position
        found = self._db.execute(
            "SELECT MAX(position) FROM memories WHERE namespace = ? AND session_id = ?",
            (namespace, memory.session_id),
        ).fetchone()[0]
        return 0 if found is None else int(found) + 1

    def replace(self, memory: Memory, vector: Vector | None) -> None:
        assignments = ", ".join(f"{c.strip()} = ?" for c in _COLUMNS.split(",")[1:])
        namespace = self.tenancy.namespace_for(memory.namespace)
        with self._write_words():
            pk = self._pks([memory.id]).get(memory.id)
            if pk is None:
                raise NotFoundError(f"unknown id: no memory with id {memory.id}")
            row = _row(memory, namespace, self._position(memory, namespace))
            self._db.execute(f"UPDATE memories SET {assignments} WHERE pk = ?", (*row[1:], pk))
            self._db.execute("DELETE FROM memory_tags WHERE pk = ?", (pk,))
            self._db.execute("DELETE FROM memory_entities WHERE pk = ?", (pk,))
            if vector is not None:
                self._db.execute("DELETE FROM vectors WHERE pk = ?", (pk,))
            self._write_children(pk, memory, vector)

    def _pks(self, ids: Sequence[str]) -> dict[str, int]:
        """Row keys of the visible memories with these ids (the tenant's own namespace wins
        when a shared one holds the same id)."""
        found: dict[str, int] = {}
        wall, wall_params = q.namespace_sql(self._visible)
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for memory_id, pk, _own in self._db.execute(
                f"SELECT m.id, m.pk, m.namespace = ? AS own FROM memories m"
                f" WHERE m.id IN ({marks}) AND {wall} ORDER BY own",
                [self.tenancy.tenant, *chunk, *wall_params],
            ):
                found[memory_id] = pk
        return found

    def forget(self, ids: Sequence[str], *, hard: bool, at: datetime) -> int:
        with self._write_words():
            pks = list(self._pks(ids).values())
            marks = ",".join("?" * len(pks))
            if hard:
                cursor = self._db.execute(f"DELETE FROM memories WHERE pk IN ({marks})", pks)
            else:
                cursor = self._db.execute(
                    f"UPDATE memories SET forgotten_at = ? WHERE pk IN ({marks})"
                    " AND forgotten_at IS NULL",
                    [at.timestamp(), *pks],
                )
            return cursor.rowcount

    def record_access(self, ids: Sequence[str], at: datetime) -> None:
        if not ids:
            return
        with self._write():
            pks = list(self._pks(ids).values())
            marks = ",".join("?" * len(pks))
            self._db.execute(
                f"UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?"
                f" WHERE pk IN ({marks})",
                [at.timestamp(), *pks],
            )

    def set_fingerprint(self, fingerprint: str) -> None:
        with self._write():
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('embedding_fingerprint', ?)", (fingerprint,)
            )

    def any_vectors(self) -> bool:
        return self._db.execute("SELECT 1 FROM vectors LIMIT 1").fetchone() is not None

    def swap_vectors(self, vectors: Mapping[str, Vector], fingerprint: str) -> None:
        outside, outside_params = q.outside_sql(self._visible)
        wall, wall_params = q.namespace_sql(self._visible)
        with self._write():
            if (
                fingerprint != self.get_fingerprint()
                and self._db.execute(
                    "SELECT 1 FROM vectors v JOIN memories m ON m.pk = v.pk"
                    f" WHERE {outside} LIMIT 1",
                    outside_params,
                ).fetchone()
            ):
                raise EmbedderMismatchError(
                    "other tenants' memories in this store have vectors of the current "
                    "embedder; one store has one embedder, so a reindex with another one "
                    "must be run for every tenant of the store at once"
                )
            self._db.execute(
                f"DELETE FROM vectors WHERE pk IN (SELECT m.pk FROM memories m WHERE {wall})",
                wall_params,
            )
            pks = dict(self._db.execute(
                f"SELECT m.id, m.pk FROM memories m WHERE {wall} ORDER BY m.namespace = ?",
                [*wall_params, self.tenancy.tenant]).fetchall())  # fmt: skip
            self._db.executemany(
                "INSERT INTO vectors (pk, vector) VALUES (?, ?)",
                [
                    (pks[i], np.asarray(v, np.float32).tobytes())
                    for i, v in vectors.items()
                    if i in pks
                ],  # fmt: skip
            )
            self._db.execute(
                f"UPDATE memories SET embedding_fingerprint = ? WHERE {wall.replace('m.', '')}",
                [fingerprint, *wall_params],
            )
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('embedding_fingerprint', ?)", (fingerprint,)
            )

    # -- reads ---------------------------------------------------------------------------

    def mark_migration(self, unfinished: bool) -> None:
        key = migration_key(self.tenancy.tenant)
        with self._write():
            if unfinished:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, '1')", (key,))
            else:
                self._db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def unfinished_migration(self) -> bool:
        keys = [migration_key(n) for n in self._visible]
        marks = ",".join("?" * len(keys))
        found = self._db.execute(f"SELECT 1 FROM meta WHERE key IN ({marks})", keys).fetchone()
        return found is not None

    def get_fingerprint(self) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'embedding_fingerprint'")
        found = row.fetchone()
        return None if found is None else str(found[0])

    def get_many(self, ids: Sequence[str]) -> list[Memory]:
        found: dict[str, Memory] = {}
        wall, wall_params = q.namespace_sql(self._visible)
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            # The tenant's own namespace last, so that it wins over a shared one's same id.
            for r in self._db.execute(
                f"SELECT {_COLUMNS} FROM memories m WHERE m.id IN ({marks}) AND {wall}"
                " ORDER BY m.namespace = ?",
                [*chunk, *wall_params, self.tenancy.tenant],
            ):
                memory = _memory(r)
                found[memory.id] = memory
        return [found[i] for i in ids if i in found]

    def parallel_reads(self) -> bool:
        return self._may_spread() and self._rows_max() >= PARALLEL_READS_MIN_ROWS

    def _may_spread(self) -> bool:
        """Whether reads may run on several threads at once: a file (an in-memory database
        has one connection, so the calls would take turns) on a machine not busy."""
        return self.path != ":memory:" and not threads.machine_busy()

    def _rows_max(self) -> int:
        """The largest ``pk``: the store's size, as the size thresholds count it."""
        return readers.rows_max(self._db)

    def search_rows(
        self,
        requests: Sequence[CandidateRequest],
        *,
        vectors: bool = False,
        neighbor_radius: int = 0,
        neighbor_depth: int = 0,
    ) -> SearchRows:
        # In process a call costs no round trip: the candidates only, the rest read later
        # for the memories the pipeline keeps (the flags ask for what that covers).
        return compose_search_rows(self, requests)

    def session_neighbors(
        self, ids: Sequence[str], radius: int
    ) -> dict[str, list[tuple[str, int]]]:
        if not ids or radius < 1:
            return {}
        wall, wall_params = q.namespace_sql(self._visible)
        # Two steps, each served by an index: the sessions of the given memories (the
        # (namespace, id) key), then each session read whole in storage order (the
        # (namespace, session_id, position) index). One query with a row-value ``IN``
        # subquery scanned the table: 9 s per search at 1M memories.
        sessions: dict[tuple[str, str], None] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for namespace, session in self._db.execute(
                f"SELECT m.namespace, m.session_id FROM memories m WHERE m.id IN ({marks})"
                f" AND {wall}",
                [*chunk, *wall_params],
            ):
                if session is not None:
                    sessions[(namespace, session)] = None
        pairs = sorted(sessions)
        rows: list[tuple[str, str, str]] = []
        for start in range(0, len(pairs), 400):
            chunk_pairs = pairs[start : start + 400]
            values = ",".join(["(?, ?)"] * len(chunk_pairs))
            rows += self._db.execute(
                f"WITH x(namespace, session_id) AS (VALUES {values})"
                " SELECT m.id, m.namespace, m.session_id FROM x CROSS JOIN memories m"
                " ON m.namespace = x.namespace AND m.session_id = x.session_id"
                " WHERE m.forgotten_at IS NULL"
                " ORDER BY m.namespace, m.session_id, m.position, m.pk",
                [v for pair in chunk_pairs for v in pair],
            ).fetchall()
        return neighbors_in_sessions(rows, ids, radius)

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        found: dict[str, Vector] = {}
        wall, wall_params = q.namespace_sql(self._visible)
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                "SELECT m.id, v.vector FROM vectors v JOIN memories m ON m.pk = v.pk"
                f" WHERE m.id IN ({marks}) AND {wall} ORDER BY m.namespace = ?",
                [*chunk, *wall_params, self.tenancy.tenant],
            )
            found.update({i: np.frombuffer(blob, dtype=np.float32) for i, blob in rows})
        return found

    def find_duplicates(self, keys: Sequence[DedupKey]) -> dict[DedupKey, str]:
        wanted = set(keys)
        found: dict[DedupKey, str] = {}
        hashes = sorted({k[0] for k in keys})
        wall, wall_params = q.namespace_sql(self._visible)
        for start in range(0, len(hashes), 500):
            chunk = hashes[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for r in self._db.execute(
                "SELECT m.id, m.content_hash, m.scope, m.project, m.session_id, m.namespace"
                f" FROM memories m WHERE m.content_hash IN ({marks}) AND {wall}"
                " AND m.forgotten_at IS NULL",
                [*chunk, *wall_params],
            ):
                key = (r[1], r[2], r[3], r[4], r[5])
                if key in wanted:
                    found.setdefault(key, r[0])
        return found

    def export(self, batch: int) -> Iterator[list[tuple[Memory, Vector | None]]]:
        last = 0
        wall, wall_params = q.namespace_sql(self._visible)
        while True:
            rows = self._db.execute(
                f"SELECT m.pk, {_COLUMNS}, v.vector FROM memories m"
                f" LEFT JOIN vectors v ON v.pk = m.pk WHERE m.pk > ? AND {wall}"
                " ORDER BY m.pk LIMIT ?",
                (last, *wall_params, batch),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(_memory(tuple(r)[1:-1]), None if r[-1] is None
                    else np.frombuffer(r[-1], dtype=np.float32)) for r in rows]  # fmt: skip

    def iter_contents(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        last = 0
        wall, wall_params = q.namespace_sql(self._visible)
        while True:
            rows = self._db.execute(
                "SELECT m.pk, m.id, m.content, m.embed_context FROM memories m"
                f" WHERE m.pk > ? AND {wall} ORDER BY m.pk LIMIT ?",
                (last, *wall_params, batch),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(r[1], f"{r[3]}\n{r[2]}" if r[3] else r[2]) for r in rows]

    # -- candidates ----------------------------------------------------------------------

    def candidates(self, request: CandidateRequest) -> dict[str, list[ChannelCandidate]]:
        where, params = q.filter_sql(request.filters, self._visible)
        scope = readers.Scope(lambda: self._db, where, params, self._visible, self._may_spread(),
                              q.is_trivial(request.filters))  # fmt: skip
        return {name: self._readers[name](ask, scope)
                for name, ask in request.asks.items() if name in self._readers}  # fmt: skip

    def exact_vectors(self) -> bool:
        return self.vector_reads.exact()

    def search_exactly(self, words: bool = True, vectors: bool = True) -> None:
        """From now on this handle scores every matching row with FTS5 instead of reading the
        word index (``words``), and every vector instead of reading the ANN index
        (``vectors``): the reference the benchmarks compare the indexes with."""
        self.vector_reads.search_exactly(words, vectors)

    # -- status --------------------------------------------------------------------------

    def stats(self) -> StoreStats:
        wall, wall_params = q.namespace_sql(self._visible)
        one = self._db.execute(
            "SELECT COUNT(*), SUM(m.forgotten_at IS NOT NULL), COUNT(DISTINCT m.session_id),"
            f" MIN(m.ref_time), MAX(m.ref_time) FROM memories m WHERE {wall}",
            wall_params,
        ).fetchone()
        by_type = dict(
            self._db.execute(
                f"SELECT m.type, COUNT(*) FROM memories m WHERE {wall}"
                " AND m.forgotten_at IS NULL GROUP BY m.type",
                wall_params,
            ).fetchall()
        )
        by_source = dict(
            self._db.execute(
                f"SELECT m.source_kind, COUNT(*) FROM memories m WHERE {wall}"
                " AND m.forgotten_at IS NULL GROUP BY m.source_kind",
                wall_params,
            ).fetchall()
        )
        days = self._db.execute(
            f"SELECT CAST(m.created_at / 86400 AS INTEGER) AS day, COUNT(*) FROM memories m"
            f" WHERE {wall} GROUP BY day ORDER BY day",
            wall_params,
        ).fetchall()
        vectors = self._db.execute(
            f"SELECT COUNT(*) FROM vectors v JOIN memories m ON m.pk = v.pk WHERE {wall}",
            wall_params,
        ).fetchone()[0]
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
            by_source=by_source,
            added_by_day=day_counts(days),
            unfinished_migration=self.unfinished_migration(),
            advice=self._advice(),
        )

    def _advice(self) -> tuple[str, ...]:
        exposed = () if self.path == ":memory:" else opening.exposure_advice(self.path)
        folder = self.vector_reads.mirror.index_path
        if not older_build(folder):
            return exposed
        return (*exposed, f"the ANN index in {folder} was built by an older recalld with a"
                " narrower beam (it misses more of the nearest memories at 1M): delete that"
                " folder and the next search builds a better one (minutes at 1M memories,"
                " once)")  # fmt: skip

    # -- indexed source files --------------------------------------------------------------

    def save_source_root(self, root: SourceRoot) -> None:
        with self._write():
            self._db.execute(q.UPSERT_ROOT_SQL, (self.tenancy.tenant, root.path,
                             json.dumps(list(root.globs)), _now(),
                             codec.ts(root.indexed_at)))  # fmt: skip

    def source_roots(self) -> list[SourceRoot]:
        rows = self._db.execute(
            "SELECT path, globs, indexed_at FROM source_roots WHERE namespace = ? ORDER BY path",
            (self.tenancy.tenant,),
        )
        return [SourceRoot(r[0], tuple(json.loads(r[1])), _dt(r[2])) for r in rows]

    def source_files(self, roots: Sequence[str] | None = None) -> list[SourceFile]:
        rows = self._db.execute(*q.source_files_sql(self.tenancy.tenant, roots))
        return [_source_file(r) for r in rows]

    def save_source_files(self, files: Sequence[SourceFile]) -> None:
        own = self.tenancy.tenant
        with self._write():
            self._db.executemany(q.UPSERT_FILE_SQL, [_file_row(own, f) for f in files])

    def replace_file_chunks(
        self, file: SourceFile, memories: Sequence[Memory], vectors: Vector | None
    ) -> None:
        own = self.tenancy.tenant
        with self._write_words():
            self._db.execute(q.DELETE_FILE_CHUNKS_SQL, (own, file.path))
            # A file's chunks live in the tenant's own namespace, like its record.
            self._insert_rows([replace(m, namespace=own) for m in memories], vectors)
            self._db.execute(q.UPSERT_FILE_SQL, _file_row(own, file))

    def remove_source_files(self, paths: Sequence[str]) -> int:
        deleted = 0
        own = self.tenancy.tenant
        with self._write_words():
            for path in paths:
                deleted += self._db.execute(q.DELETE_FILE_CHUNKS_SQL, (own, path)).rowcount
                self._db.execute(
                    "DELETE FROM source_files WHERE namespace = ? AND path = ?", (own, path)
                )
        return deleted

    # -- API keys (across tenants) ---------------------------------------------------------

    def add_key(self, key: ApiKey, secret_hash: str) -> None:
        created = (key.created_at or datetime.now(UTC)).timestamp()
        with self._write():
            self._db.execute(
                "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (key.id, secret_hash, key.tenant, json.dumps(list(key.shared)), int(key.admin),
                 key.label, created),
            )  # fmt: skip

    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        row = self._db.execute(f"SELECT {_KEY_COLUMNS}, secret_hash FROM api_keys WHERE id = ?",
                               (key_id,)).fetchone()  # fmt: skip
        return None if row is None else (_api_key(row), row["secret_hash"])

    def list_keys(self) -> list[ApiKey]:
        rows = self._db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
        return [_api_key(r) for r in rows]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        with self._write():
            done = self._db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (at.timestamp(), key_id),
            )
        return done.rowcount > 0

    def active_keys(self) -> int:
        found = self._db.execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")
        return int(found.fetchone()[0])

    def close(self) -> None:
        with self._connections_lock:
            for db in self._connections:
                db.close()
            self._connections.clear()

    # Last in the class: a method named ``list`` shadows the builtin in later annotations.
    def list(
        self, filters: MemoryFilter, *, limit: int, offset: int = 0, newest_first: bool = True
    ) -> list[Memory]:
        where, params = q.filter_sql(filters, self._visible)
        order = "DESC" if newest_first else "ASC"
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM memories m WHERE {where}"
            f" ORDER BY m.ref_time {order}, m.pk {order} LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [_memory(r) for r in rows]


_KEY_COLUMNS = "id, tenant, shared, admin, label, created_at, revoked_at"


def _api_key(r: sqlite3.Row) -> ApiKey:
    return ApiKey(id=r["id"], tenant=r["tenant"], shared=tuple(json.loads(r["shared"])),
                  admin=bool(r["admin"]), label=r["label"], created_at=_dt(r["created_at"]),
                  revoked_at=_dt(r["revoked_at"]))  # fmt: skip


def _now() -> float:
    return datetime.now(UTC).timestamp()


def _file_row(namespace: str, f: SourceFile) -> tuple[Any, ...]:
    return (namespace, f.path, f.root, f.size, f.mtime_ns, f.status, f.content_hash, f.chunker,
            f.error, codec.ts(f.indexed_at))  # fmt: skip


def _source_file(r: sqlite3.Row) -> SourceFile:
    return SourceFile(
        path=r["path"], root=r["root"], size=r["size"], mtime_ns=r["mtime_ns"],
        status=r["status"], content_hash=r["content_hash"], chunker=r["chunker"],
        error=r["error"], indexed_at=_dt(r["indexed_at"]), chunks=r["chunks"],
    )  # fmt: skip


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
        elif self._db.in_transaction:  # SQLite may already have rolled back (e.g. on corruption)
            self._db.execute("ROLLBACK")
