"""The SQLite store: one file, WAL, FTS5 BM25 (porter) + trigram, exact vector search.

The class is the wiring: its connections (one per thread), its transactions, and one
method per call of the store protocol, each a few lines over the modules that do the work:
:mod:`.writes` (memories), :mod:`.source_index` (indexed files), :mod:`.api_keys`,
:mod:`.status`, :mod:`.readers` and :mod:`.vector_reads` (the channels), and the row reads
below.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from recalld import threads
from recalld.errors import StoreError
from recalld.records import ApiKey, Memory, MemoryFilter
from recalld.stores.base import (
    CandidateRequest,
    ChannelCandidate,
    DedupKey,
    SearchRows,
    SourceContext,
    SourceFile,
    SourceRoot,
    StoreStats,
    Tenancy,
    Vector,
    already_stored,
    compose_search_rows,
)
from recalld.stores.sqlite import (
    api_keys,
    neighbors,
    opening,
    queries as q,
    readers,
    source_index,
    status,
    word_scores,
    writes,
)
from recalld.stores.sqlite.kept_rows import KeptRows
from recalld.stores.sqlite.locking import LOCK_WAIT_S
from recalld.stores.sqlite.row_values import COLUMNS as _COLUMNS, memory as _memory
from recalld.stores.sqlite.transactions import Transaction, guarded
from recalld.stores.sqlite.vector_reads import VectorReads

PARALLEL_READS_MIN_ROWS = 50_000
"""From this many rows (the largest ``pk``) a search reads the word channels on a second
thread (:meth:`SQLiteStore.parallel_reads`) while the machine is not busy: BM25 then takes
about as long as embedding the query on one thread, while on a small store it takes a
fraction of a millisecond and embedding on every core is the faster."""

MAPPED_BYTES = 1 << 31
"""How much of the store file a connection reads through a memory map (``PRAGMA
mmap_size``; SQLite caps it at its build's maximum, 2 GB in the builds Python ships).
A page read then costs a look into memory rather than a call to the system and a copy into
the connection's own 2 MB cache, which a search's few hundred random rows overflow. On the
100k scale store (435 MB), four runs of 200 questions each alternated with the cache:
CPU a search 0.94-0.95x, p95 0.90-0.98x, every top 10 the same; at 10k 0.97-0.99x; at 1M
(its first 2 GB of 4.4 mapped) 0.99-1.00x (``scripts/bench_ab.py --mechanism
mapped-store``; docs/design/search-cpu-mapped.md). The mapped pages are
the system's page cache, shared by every connection and process (a process's resident
size counts those it touched); writes still go through the journal."""


class _ThreadConnection:
    """One thread's connection to the file, closed once nothing holds this: when its thread
    ends (Python then drops the thread's ``threading.local`` values). A server's thread pool
    retires idle threads and starts new ones for the next burst (anyio's after 10 s idle),
    and a connection kept past its thread held its file descriptors and page cache until
    the store closed: 30 more descriptors each burst under the load bench."""

    __slots__ = ("__weakref__", "db")

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        weakref.finalize(self, db.close)


@guarded
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
        self._access = (
            opening.Access(self.path, False, None)
            if self.path == ":memory:"
            else opening.prepare(Path(path))
        )
        # One connection per thread (a server calls the store from many), closed when its
        # thread ends; an in-memory database exists only in its one connection, so its
        # calls take turns on it instead.
        self._local = threading.local()
        self._connections: weakref.WeakSet[_ThreadConnection] = weakref.WeakSet()
        self._connections_lock = threading.Lock()
        self._shared: sqlite3.Connection | None = None
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
        self._word_lengths = word_scores.Lengths()
        """Rows' token counts the word channel keeps between searches (small stores)."""
        self._kept_rows = KeptRows()
        """Memories read by id, kept between searches while the file is unchanged."""

    def _connect(self, configure: bool = True) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(
                self._access.target,
                timeout=LOCK_WAIT_S,
                isolation_level=None,
                check_same_thread=False,
                uri=self._access.uri,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store file {self.path}: {exc}") from exc
        db.row_factory = sqlite3.Row
        if configure:
            self._configure(db)
        if self.path == ":memory:":
            self._shared = db  # held by the store: it is the database
            return db
        owned = _ThreadConnection(db)
        self._local.owned = owned
        with self._connections_lock:
            self._connections.add(owned)
        return db

    @staticmethod
    def _configure(db: sqlite3.Connection) -> None:
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute(f"PRAGMA mmap_size={MAPPED_BYTES}")

    @property
    def _db(self) -> sqlite3.Connection:
        """This thread's connection (opened on its first call)."""
        if self._shared is not None:
            return self._shared
        owned: _ThreadConnection | None = getattr(self._local, "owned", None)
        return self._connect() if owned is None else owned.db

    # -- transactions --------------------------------------------------------------------

    def _write(self) -> Transaction:
        if self._refusal is not None:
            raise StoreError(self._refusal)
        return Transaction(self._db)

    @contextmanager
    def _write_words(self) -> Iterator[None]:
        """A write that may change memories' words: the transaction, then each word engine
        brought up to date (the word index is built once the store is large enough; see
        word_index). The write stands when that fails: the log keeps what it lacks."""
        with self._write():
            yield
        for engine in self.vector_reads.word_engines:
            engine.after_write(self._db)

    # -- writes (stores/sqlite/writes.py) --------------------------------------------------

    def insert(self, memories: Sequence[Memory], vectors: Vector | None) -> None:
        with self._write_words():
            writes.insert_rows(self._db, self.tenancy, memories, vectors)

    def insert_unique(
        self, memories: Sequence[Memory], vectors: Vector | None, by_content: bool = True
    ) -> dict[str, str]:
        with self._write_words():  # BEGIN IMMEDIATE: one writer at a time, across processes
            found = already_stored(memories, self.get_many, self.find_duplicates, by_content)
            keep = [i for i, match in enumerate(found) if match is None]
            kept_vectors = None if vectors is None else np.asarray(vectors)[keep]
            writes.insert_rows(self._db, self.tenancy, [memories[i] for i in keep], kept_vectors)
        return {m.id: match for m, match in zip(memories, found, strict=True) if match}

    def replace(self, memory: Memory, vector: Vector | None) -> None:
        with self._write_words():
            writes.replace(self._db, self.tenancy, memory, vector)

    def forget(self, ids: Sequence[str], *, hard: bool, at: datetime) -> int:
        with self._write_words():
            return writes.forget(self._db, self.tenancy, ids, hard=hard, at=at)

    def record_access(self, ids: Sequence[str], at: datetime) -> None:
        if not ids:
            return
        with self._write():
            writes.record_access(self._db, self.tenancy, ids, at)

    def set_fingerprint(self, fingerprint: str) -> None:
        with self._write():
            writes.set_fingerprint(self._db, fingerprint)

    def any_vectors(self) -> bool:
        return self._db.execute("SELECT 1 FROM vectors LIMIT 1").fetchone() is not None

    def swap_vectors(self, vectors: Mapping[str, Vector], fingerprint: str) -> None:
        with self._write():
            current = status.fingerprint(self._db)
            writes.swap_vectors(self._db, self.tenancy, vectors, fingerprint, current)

    def mark_migration(self, unfinished: bool) -> None:
        with self._write():
            status.mark_migration(self._db, self.tenancy.tenant, unfinished)

    # -- status (stores/sqlite/status.py) --------------------------------------------------

    def stats(self) -> StoreStats:
        index_path = self.vector_reads.mirror.index_path
        return status.stats(self._db, self.path, self._visible, index_path)

    def unfinished_migration(self) -> bool:
        return status.unfinished_migration(self._db, self._visible)

    def get_fingerprint(self) -> str | None:
        return status.fingerprint(self._db)

    # -- reads -----------------------------------------------------------------------------

    def get_many(self, ids: Sequence[str]) -> list[Memory]:
        db = self._db
        # Rows read since the last change are kept (kept_rows.py), under the one namespace
        # a handle sees; a handle that sees shared namespaces too reads every time.
        generation = self._kept_rows.look(db) if len(self._visible) == 1 else None
        found = (
            {} if generation is None else self._kept_rows.take(generation, self._visible[0], ids)
        )
        wall, wall_params = q.namespace_sql(self._visible)
        # The tenant's own namespace last, so that it wins over a shared one's same id. With
        # one namespace visible an id names one row: no order to keep, and SQLite's sort
        # copied every wide row through a temporary tree (5-7% of the read's CPU).
        order, order_params = (
            ("", [])
            if len(self._visible) == 1
            else (" ORDER BY m.namespace = ?", [self.tenancy.tenant])
        )
        missing = [i for i in ids if i not in found]
        read: list[Memory] = []
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for r in db.execute(
                f"SELECT {_COLUMNS} FROM memories m WHERE m.id IN ({marks}) AND {wall}{order}",
                [*chunk, *wall_params, *order_params],
            ):
                memory = _memory(r)
                found[memory.id] = memory
                read.append(memory)
        if generation is not None and read:
            self._kept_rows.keep(generation, self._visible[0], read)
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
        candidate_vectors: bool = False,
    ) -> SearchRows:
        # In process a call costs no round trip: the candidates only, the rest read later
        # for the memories the pipeline keeps (the flags ask for what that covers), but for
        # the vectors the vector channels scored, which cost nothing more to hand on.
        if not vectors:
            self.vector_reads.forget_pks()  # no later read may use another search's pks
            return compose_search_rows(self, requests)
        with self.vector_reads.keeping_vectors() as scored:
            rows = compose_search_rows(self, requests)
        return replace(rows, vectors=scored) if scored else rows

    def session_neighbors(
        self, ids: Sequence[str], radius: int
    ) -> dict[str, list[tuple[str, int]]]:
        return neighbors.session_neighbors(self._db, self._visible, ids, radius)

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        found: dict[str, Vector] = {}
        wall, wall_params = q.namespace_sql(self._visible)
        reads = self.vector_reads
        with reads.lock:  # the ANN index's vectors file, when it holds them
            lazy = reads.lazy
            if lazy is not None and ids:
                found, ids = lazy.vectors_for(
                    self._db, ids, wall, wall_params, self.tenancy.tenant, reads.known_pks()
                )
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
            yield [
                (
                    _memory(tuple(r)[1:-1]),
                    None if r[-1] is None else np.frombuffer(r[-1], dtype=np.float32),
                )
                for r in rows
            ]

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
        scope = readers.Scope(
            lambda: self._db,
            where,
            params,
            self._visible,
            self._may_spread(),
            q.is_trivial(request.filters),
            self.vector_reads.noting_pks(),
            self._word_lengths,
        )
        reads = self.vector_reads
        listed = reads.window_rows_beside(request.asks, scope)
        channel_readers = self._readers
        if listed is not None:
            window = functools.partial(reads.window_semantic, listed=listed)
            channel_readers = {**channel_readers, "window_semantic": window}
        try:
            return {
                name: channel_readers[name](ask, scope)
                for name, ask in request.asks.items()
                if name in channel_readers
            }
        finally:
            if listed is not None:
                futures.wait([listed])  # never left listing after the call

    def exact_vectors(self) -> bool:
        return self.vector_reads.exact()

    def search_exactly(self, words: bool = True, vectors: bool = True) -> None:
        """From now on this handle scores every matching row with FTS5 instead of reading the
        word index (``words``), and every vector instead of reading the ANN index
        (``vectors``): the reference the benchmarks compare the indexes with."""
        self.vector_reads.search_exactly(words, vectors)

    # -- indexed source files (stores/sqlite/source_index.py) ------------------------------

    def save_source_root(self, root: SourceRoot) -> None:
        with self._write():
            source_index.save_root(self._db, self.tenancy.tenant, root)

    def source_roots(self) -> list[SourceRoot]:
        return source_index.roots(self._db, self.tenancy.tenant)

    def source_files(self, roots: Sequence[str] | None = None) -> list[SourceFile]:
        return source_index.files(self._db, self.tenancy.tenant, roots)

    def save_source_files(self, files: Sequence[SourceFile]) -> None:
        with self._write():
            source_index.save_files(self._db, self.tenancy.tenant, files)

    def replace_file_chunks(
        self,
        file: SourceFile,
        memories: Sequence[Memory],
        vectors: Vector | None,
        text: str | None = None,
    ) -> None:
        with self._write_words():
            source_index.replace_chunks(self._db, self.tenancy, file, memories, vectors, text)

    def remove_source_files(self, paths: Sequence[str]) -> int:
        with self._write_words():
            return source_index.remove_files(self._db, self.tenancy.tenant, paths)

    def source_contexts(self) -> list[SourceContext]:
        return source_index.contexts(self._db, self.tenancy.tenant)

    def save_source_context(self, root: str, prefix: str, text: str | None) -> None:
        with self._write():
            source_index.save_context(self._db, self.tenancy.tenant, root, prefix, text)

    def remove_source_root(self, path: str) -> int:
        with self._write_words():
            return source_index.remove_root(self._db, self.tenancy.tenant, path)

    def source_texts(self, paths: Sequence[str]) -> dict[str, str]:
        return source_index.texts(self._db, self.tenancy.tenant, paths)

    def save_source_texts(self, texts: Mapping[str, str]) -> None:
        with self._write():
            source_index.save_texts(self._db, self.tenancy.tenant, texts)

    # -- API keys, across tenants (stores/sqlite/api_keys.py) -------------------------------

    def add_key(self, key: ApiKey, secret_hash: str) -> None:
        with self._write():
            api_keys.add(self._db, key, secret_hash)

    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        return api_keys.find(self._db, key_id)

    def list_keys(self) -> list[ApiKey]:
        return api_keys.every(self._db)

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        with self._write():
            return api_keys.revoke(self._db, key_id, at)

    def active_keys(self) -> int:
        return api_keys.active(self._db)

    def close(self) -> None:
        with self._connections_lock:
            for owned in list(self._connections):
                owned.db.close()
            self._connections.clear()
        if self._shared is not None:
            self._shared.close()

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
