"""The PostgreSQL store: pgvector (HNSW, cosine), FTS5's tokens + GIN (ranked by FTS5's
BM25), pg_trgm, an entity array; a connection pool, every channel in one SQL statement,
tenants walled in twice (the store's ``WHERE`` clauses and Row-Level Security)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from recalld.errors import EmbedderMismatchError, NotFoundError, StoreError
from recalld.lexical import tokenize_many
from recalld.records import Memory, MemoryFilter
from recalld.stores import rows as codec
from recalld.stores.base import (
    DedupKey,
    Tenancy,
    Vector,
    already_stored,
    migration_key,
)
from recalld.stores.postgres import indexes as ix, queries as q, reads, results as res, writes as w
from recalld.stores.postgres.admin import Administration
from recalld.stores.postgres.failures import pg_errors, raising_store_errors, redacted
from recalld.stores.postgres.fingerprint import KEY as FINGERPRINT, KnownFingerprint
from recalld.stores.postgres.loaders import register as register_adapters
from recalld.stores.postgres.migrations import APP_ID, KEEP_VECTORS_INLINE
from recalld.stores.postgres.plans import PlanChoice
from recalld.stores.postgres.probe import check_vectors_once
from recalld.stores.postgres.schema import migrate, refuse_foreign
from recalld.stores.postgres.searching import Searching
from recalld.stores.postgres.sources import SourceFiles
from recalld.stores.postgres.words_due import WordsWhenDue

POOL_MAX = 8
"""Connections a store handle keeps at most (one per concurrently busy thread)."""


@raising_store_errors
class PostgresStore(Searching, WordsWhenDue, Administration, SourceFiles):
    """A :class:`~recalld.stores.base.Store` and
    :class:`~recalld.stores.base.SourceIndex` in a PostgreSQL database with pgvector.

    Args:
        dsn: ``postgresql://...``; the role needs the privileges listed in
            docs/design/architecture.md (and the ``vector`` and ``pg_trgm`` extensions, which the
            first migration creates if it may).
        tenancy: whose memories this handle reaches (default: the default tenant alone).
    """

    def __init__(self, dsn: str, tenancy: Tenancy | None = None) -> None:
        self.tenancy = tenancy or Tenancy()
        self.channels = frozenset(q.READERS)
        self._visible = list(self.tenancy.visible)
        self._dsn = dsn
        try:
            self.path = redacted(dsn)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid PostgreSQL DSN: {exc}") from exc
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                refuse_foreign(conn, self.path)
                migrate(conn)
                # Before the first vector is written: a server whose pgvector cannot run
                # here fails in one sentence instead of dropping every connection.
                check_vectors_once(dsn, conn, self.path)
                # Whether the tenant, seen alone, has a vector index of its own and word
                # postings, for the handle's life (see indexes.Indexes); read behind the
                # tenant wall like any read (an ordinary role saw no listed namespace).
                self._declare(conn, ix.EF_SEARCH)
                has = ix.Indexes.read(conn, self._visible)
                self._own_beam, self._word_postings = has.own_beam, has.word_postings
                self._word_ranked = has.ranked
                self._walled = ix.walled(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store {self.path}: {exc}") from exc
        self._load_types: list[int] = []
        self._deferring = False
        self._words_refused = False
        """A build of the tenant's word postings was refused (:mod:`.words_due`)."""
        self._unseen_writes = 0
        """Memories this handle wrote since it last counted the tenant's."""
        self._ef = ix.EF_SEARCH
        """The HNSW candidates the handle's connections were given (see _ef_search)."""
        self._visible_count = (0, 0, -math.inf)
        self._plans = PlanChoice()
        self._fingerprint = KnownFingerprint()
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=POOL_MAX,
            configure=self._configure,
            open=True,
            timeout=30.0,
        )

    def _declare(self, conn: psycopg.Connection[Any], ef_search: int) -> None:
        """The handle's settings for ``conn``'s session, in one statement: the namespaces it
        sees (the second wall: Row-Level Security admits only their rows), the HNSW
        candidates ``ef_search``, and no JIT."""
        conn.execute(
            "SELECT set_config('recalld.namespaces', %s, false),"
            " set_config('hnsw.ef_search', %s, false),"
            " set_config('hnsw.iterative_scan', 'strict_order', false),"
            # JIT compiling a search's CTEs costs tens to hundreds of ms, never repaid here.
            " set_config('jit', 'off', false)",
            (",".join(self._visible), str(ef_search)),
        )

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        register_adapters(conn)
        self._plans.configure(conn)
        self._declare(conn, self._ef_search(conn))
        try:
            with conn.transaction():  # a savepoint: the settings above stay
                conn.execute(w.CREATE_LOAD)
            if not self._load_types:
                self._load_types = [r[0] for r in conn.execute(w.LOAD_TYPES).fetchall()]
        except psycopg.errors.InsufficientPrivilege:
            self._load_types = []  # no TEMP privilege: rows go in one statement each
        conn.commit()

    def _ef_search(self, conn: psycopg.Connection[Any]) -> int:
        """:func:`indexes.handle_ef_search` when the connection is made, kept as the
        handle's for :func:`indexes.near_memory`."""
        self._ef = ix.handle_ef_search(conn, self._visible, self._own_beam)
        return self._ef

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; its work commits as one transaction when the block ends."""
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit, for a read of ONE statement: it is sent in
        one round trip, with no BEGIN or COMMIT around it."""
        with self._pool.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                if not conn.closed:  # closed: the pool replaces it
                    conn.autocommit = False

    # -- writes --------------------------------------------------------------------------

    def insert(self, memories: Sequence[Memory], vectors: Vector | None) -> None:
        with self._conn() as conn:
            self._insert_rows(conn, memories, vectors)
        self._words_when_due(len(memories))

    def insert_unique(
        self, memories: Sequence[Memory], vectors: Vector | None, by_content: bool = True
    ) -> dict[str, str]:
        """A transaction-scoped advisory lock on each namespace written (taken in one
        order, so two writers cannot deadlock) makes the check and the insert one step for
        every other writer of that namespace, as ``BEGIN IMMEDIATE`` does on SQLite: one
        lock a namespace, not one a memory, so a large batch cannot fill the server's lock
        table. The vector column's first dimension is set before it: that table lock, taken
        while this transaction holds the advisory lock and another writer's reads hold the
        table, would deadlock."""
        with self._conn() as conn:
            if vectors is not None:
                self._ensure_dimension(conn, int(np.asarray(vectors).shape[-1]))
            spaces = sorted({self.tenancy.namespace_for(m.namespace) for m in memories})
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('recalld add ' || n, 0))"
                " FROM (SELECT n FROM unnest(%s::text[]) AS n ORDER BY n) AS ordered",
                (spaces,),
            )
            found = already_stored(
                memories,
                partial(self._get_many, conn),
                partial(reads.find_duplicates, conn, self._visible),
                by_content,
            )
            keep = [i for i, match in enumerate(found) if match is None]
            rows = None if vectors is None else np.asarray(vectors)[keep]
            self._insert_rows(conn, [memories[i] for i in keep], rows)
        self._words_when_due(len(keep))
        return {m.id: match for m, match in zip(memories, found, strict=True) if match}

    def _insert_rows(
        self, conn: psycopg.Connection[Any], memories: Sequence[Memory], vectors: Vector | None
    ) -> None:
        """Rows go to a session-local table by binary ``COPY`` (one stream, no per-row
        statement), then into ``memories`` by ONE ``INSERT ... SELECT``: Row-Level Security
        checks every row (``COPY FROM`` is refused on a table with it), the unique key
        refuses duplicates, and the statistics trigger fires once. A role without the
        ``TEMP`` privilege sends one ``INSERT`` a row instead (same checks, slower)."""
        if not memories:
            return
        namespaces = [self.tenancy.namespace_for(m.namespace) for m in memories]
        positions = w.positions(conn, memories, namespaces)
        if vectors is not None:
            self._fingerprint.verify_in(conn)
            self._ensure_dimension(conn, int(np.asarray(vectors).shape[-1]))
        tokens = tokenize_many([m.content for m in memories])
        rows = (
            (
                *res.row(m, ns, pos),
                tokens[i],
                len(tokens[i]),
                None if vectors is None else np.asarray(vectors[i], np.float32),
            )
            for i, (m, ns, pos) in enumerate(zip(memories, namespaces, positions, strict=True))
        )
        if self._load_types:
            w.copy_rows(conn, rows, self._load_types)
        else:
            w.insert_rows(conn, rows)
        if vectors is not None:
            self._mark_vectors(conn, set(namespaces))

    def _dimension(self, conn: psycopg.Connection[Any]) -> int | None:
        return w.vector_column(conn)[0]

    def _ensure_dimension(self, conn: psycopg.Connection[Any], dimension: int) -> None:
        """Give the vector column its dimension (and the HNSW index) on first use; build the
        index if it is missing (a bulk load that did not finish) and no load is running."""
        have, indexed = w.vector_column(conn)
        if have == dimension:
            if not indexed and not self._deferring:
                ix.create_vector_index(conn)
            return
        if have is not None:
            raise EmbedderMismatchError(
                f"vectors of {dimension} dimensions, the store's have {have}; run a reindex"
            )
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('recalld_dimension'))")
        if self._dimension(conn) is None:
            conn.execute(
                f"ALTER TABLE memories ALTER COLUMN embedding TYPE vector({dimension}),"
                f" {KEEP_VECTORS_INLINE}"
            )
            if not self._deferring:
                ix.create_vector_index(conn)

    @contextmanager
    def bulk_load(self) -> Iterator[bool]:
        """Load many memories fast: while the block runs, :meth:`insert` leaves the HNSW
        index out and the block's end builds it over every row at once (with
        ``maintenance_work_mem`` raised to fit the graph, see :func:`indexes.finish_bulk`),
        several times faster than inserting each row into the graph. Only a store that has
        never held a vector is loaded so (else the index is kept and this changes nothing);
        yields whether the index was deferred. Nothing else changes: every insert checks and
        commits as usual, searches meanwhile scan the vectors exactly; a load cut short (a
        killed process) leaves the index to the next insert of vectors."""
        with pg_errors(self.path), self._pool.connection() as conn:
            conn.autocommit = True
            try:
                if not ix.start_bulk(conn):
                    yield False
                    return
                self._deferring = True
                try:
                    yield True
                finally:
                    self._deferring = False
                    ix.finish_bulk(conn, self._dimension(conn))
            finally:
                conn.autocommit = False
        self._words_when_due(0)  # the load's writes, counted at its end

    def replace(self, memory: Memory, vector: Vector | None) -> None:
        namespace = self.tenancy.namespace_for(memory.namespace)
        assignments = ", ".join(f"{c} = %s" for c in codec.COLUMN_NAMES[1:])
        with self._conn() as conn:
            pk = self._pks(conn, [memory.id]).get(memory.id)
            if pk is None:
                raise NotFoundError(f"unknown id: no memory with id {memory.id}")
            position = w.positions(conn, [memory], [namespace])[0]
            row = res.row(memory, namespace, position)
            tokens = tokenize_many([memory.content])[0]
            conn.execute(
                f"UPDATE memories SET {assignments}, lex_tokens = %s, lex_length = %s"
                " WHERE pk = %s",
                (*row[1:], tokens, len(tokens), pk),
            )
            if vector is not None:
                self._fingerprint.verify_in(conn)
                self._ensure_dimension(conn, int(np.asarray(vector).shape[-1]))
                conn.execute(
                    "UPDATE memories SET embedding = %s WHERE pk = %s",
                    (np.asarray(vector, np.float32), pk),
                )
                self._mark_vectors(conn, {namespace})

    def _pks(self, conn: psycopg.Connection[Any], ids: Sequence[str]) -> dict[str, int]:
        """Row keys of the visible memories with these ids (the tenant's own wins)."""
        rows = conn.execute(
            "SELECT id, pk FROM memories WHERE id = ANY(%s) AND namespace = ANY(%s)"
            " ORDER BY namespace = %s",
            (list(ids), self._visible, self.tenancy.tenant),
        ).fetchall()
        return {memory_id: pk for memory_id, pk in rows}

    def forget(self, ids: Sequence[str], *, hard: bool, at: datetime) -> int:
        with self._conn() as conn:
            pks = list(self._pks(conn, ids).values())
            if hard:
                cur = conn.execute("DELETE FROM memories WHERE pk = ANY(%s)", (pks,))
            else:
                cur = conn.execute(
                    "UPDATE memories SET forgotten_at = %s WHERE pk = ANY(%s)"
                    " AND forgotten_at IS NULL",
                    (at.timestamp(), pks),
                )
            return cur.rowcount

    def record_access(self, ids: Sequence[str], at: datetime) -> None:
        if not ids:
            return
        with self._conn() as conn:
            conn.execute(
                "UPDATE memories SET access_count = access_count + 1, last_accessed_at = %s"
                " WHERE pk = ANY(%s)",
                (at.timestamp(), list(self._pks(conn, ids).values())),
            )

    def set_fingerprint(self, fingerprint: str) -> None:
        with self._conn() as conn:
            res.set_meta(conn, FINGERPRINT, fingerprint)
        self._fingerprint.wrote(fingerprint)

    def any_vectors(self) -> bool:
        # Asked of the store's facts, not the rows: Row-Level Security hides other
        # tenants' rows from this handle, but one store has one embedder.
        with self._conn() as conn:
            return bool(conn.execute(ix.VECTOR_NAMESPACES).fetchall())

    def _mark_vectors(self, conn: psycopg.Connection[Any], namespaces: set[str]) -> None:
        """Record that these namespaces hold vectors (the fact behind :meth:`any_vectors`)."""
        for namespace in sorted(namespaces):
            res.set_meta(conn, f"vectors:{namespace}", "1")

    def swap_vectors(self, vectors: Mapping[str, Vector], fingerprint: str) -> None:
        with self._conn() as conn:
            stored = res.get_meta(conn, "embedding_fingerprint")
            holders = {
                str(r[0]).removeprefix("vectors:")
                for r in conn.execute(ix.VECTOR_NAMESPACES).fetchall()
            }
            if fingerprint != stored and holders - set(self._visible):
                raise EmbedderMismatchError(
                    "other tenants' memories in this store have vectors of the current "
                    "embedder; one store has one embedder, so a reindex with another one "
                    "must be run for every tenant of the store at once"
                )
            pks = self._pks(conn, list(vectors))
            dimension = next((int(np.asarray(v).shape[-1]) for v in vectors.values()), None)
            if dimension is not None and self._dimension(conn) not in (None, dimension):
                conn.execute(
                    "UPDATE memories SET embedding = NULL WHERE namespace = ANY(%s)",
                    (self._visible,),
                )
                conn.execute("DROP INDEX IF EXISTS memories_embedding")
                conn.execute(
                    f"ALTER TABLE memories ALTER COLUMN embedding TYPE vector,"
                    f" {KEEP_VECTORS_INLINE}"
                )
            if dimension is not None:
                self._ensure_dimension(conn, dimension)
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE memories SET embedding = %s, embedding_fingerprint = %s WHERE pk = %s",
                    [
                        (np.asarray(v, np.float32), fingerprint, pks[i])
                        for i, v in vectors.items()
                        if i in pks
                    ],
                )
            res.set_meta(conn, FINGERPRINT, fingerprint)
            self._mark_vectors(conn, set(self._visible))
        self._fingerprint.wrote(fingerprint)

    # -- reads ---------------------------------------------------------------------------

    def mark_migration(self, unfinished: bool) -> None:
        key = migration_key(self.tenancy.tenant)
        with self._conn() as conn:
            if unfinished:
                res.set_meta(conn, key, "1")
            else:
                conn.execute("DELETE FROM recalld_meta WHERE key = %s", (key,))

    def unfinished_migration(self) -> bool:
        with self._read() as conn:
            return res.unfinished_migration(conn, self._visible)

    def get_fingerprint(self) -> str | None:
        """Checked before every search: once confirmed, no round trip (:mod:`.fingerprint`)."""
        return self._fingerprint.get(partial(reads.meta, self._read, FINGERPRINT))

    def find_duplicates(self, keys: Sequence[DedupKey]) -> dict[DedupKey, str]:
        with self._conn() as conn:
            return reads.find_duplicates(conn, self._visible, keys)

    def export(self, batch: int) -> Iterator[list[tuple[Memory, Vector | None]]]:
        return reads.exported(self._conn, self._visible, batch)

    def iter_contents(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        return reads.contents(self._conn, self._visible, batch)

    def close(self) -> None:
        self._pool.close()

    # Last in the class: a method named ``list`` shadows the builtin in later annotations.
    def list(
        self, filters: MemoryFilter, *, limit: int, offset: int = 0, newest_first: bool = True
    ) -> list[Memory]:
        where, params = q.filter_sql(filters, self._visible)
        order = "DESC" if newest_first else "ASC"
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {q.SELECT_COLUMNS} FROM memories m WHERE {where}"
                f" ORDER BY m.ref_time {order}, m.pk {order} LIMIT %(limit)s OFFSET %(offset)s",
                {**params, "limit": limit, "offset": offset},
            ).fetchall()
        return [res.memory(r) for r in rows]


__all__ = ["APP_ID", "PostgresStore"]
