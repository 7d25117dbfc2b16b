"""The PostgreSQL store: pgvector (HNSW, cosine), FTS5's tokens + GIN (ranked by FTS5's
BM25), pg_trgm, an entity array; a connection pool, every channel in one SQL statement,
tenants walled in twice (the store's ``WHERE`` clauses and Row-Level Security)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg_pool import ConnectionPool

from recalld import threads
from recalld.errors import EmbedderMismatchError, NotFoundError, StoreError
from recalld.lexical import tokenize_many
from recalld.records import Memory, MemoryFilter
from recalld.stores import rows as codec
from recalld.stores.base import (
    CandidateRequest,
    ChannelCandidate,
    DedupKey,
    SearchRows,
    Tenancy,
    Vector,
    already_stored,
    migration_key,
    neighbors_in_sessions,
)
from recalld.stores.postgres import indexes as ix, queries as q, reads, results as res, writes as w
from recalld.stores.postgres.admin import Administration
from recalld.stores.postgres.failures import pg_errors, raising_store_errors, redacted
from recalld.stores.postgres.fingerprint import KEY as FINGERPRINT, KnownFingerprint
from recalld.stores.postgres.loaders import register as register_adapters
from recalld.stores.postgres.migrations import APP_ID, KEEP_VECTORS_INLINE, WORDS_GONE
from recalld.stores.postgres.plans import PlanChoice
from recalld.stores.postgres.probe import check_vectors_once
from recalld.stores.postgres.schema import migrate, refuse_foreign
from recalld.stores.postgres.sources import SourceFiles
from recalld.stores.postgres.statements import execute as execute_named

T = TypeVar("T")

POOL_MAX = 8
"""Connections a store handle keeps at most (one per concurrently busy thread)."""
ROWS_DEPTH = 50
"""A search's one statement also returns the rows (and vectors) of the candidates ranked
within this in some channel, and of the top candidates' session neighbours; the pipeline
reads the few others it keeps in one or two more single-statement lookups. Rows cost the
client more than those round trips: reading every candidate's row (about 1,000 with the
neighbours of all 200 of the first channel list) took a 10k search 107 ms on average,
reading these 39-46 ms (docs/postgres.md)."""
PARALLEL_READS_MIN_ROWS = 50_000
"""From this many memories in the namespaces a handle sees, a search reads its word channels
in a statement of their own, on a second connection, while it embeds the query and reads
the vector channels in another (:meth:`PostgresStore.parallel_reads`): the tenant of 100k in
the 1M database went from 154 / 235 to 103 / 191 ms (p50 / p95), a tenant of 900 gains
nothing from it (25.5 / 34.4 against 24.4 / 34.2 ms), the same top 10s either way."""
VISIBLE_ROWS_TTL_S = 60.0
"""How long a handle trusts its count of the memories it sees (for
:data:`PARALLEL_READS_MIN_ROWS`, the word channel's engine) before counting again."""


@raising_store_errors
class PostgresStore(Administration, SourceFiles):
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
                self._walled = ix.walled(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store {self.path}: {exc}") from exc
        self._load_types: list[int] = []
        self._deferring = False
        self._ef = ix.EF_SEARCH
        """The HNSW candidates the handle's connections were given (see _ef_search)."""
        self._visible_count = (0, 0, -math.inf)
        """(memories seen, in the table, when counted): see :meth:`_rows_counted`."""
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

    @property
    def _own_index(self) -> bool:
        """Whether the tenant's rows have a vector index of their own (``_own_beam``)."""
        return self._own_beam > 0

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

    def get_many(self, ids: Sequence[str]) -> list[Memory]:
        if not ids:
            return []
        with self._read() as conn:  # a search's reads: no BEGIN / COMMIT round trips
            return self._get_many(conn, ids)

    def _get_many(self, conn: psycopg.Connection[Any], ids: Sequence[str]) -> list[Memory]:
        rows = conn.execute(
            f"SELECT {q.SELECT_COLUMNS} FROM memories m WHERE m.id = ANY(%s)"
            " AND m.namespace = ANY(%s) ORDER BY m.namespace = %s",
            (list(ids), self._visible, self.tenancy.tenant),
        ).fetchall()
        found = {r[0]: res.memory(r) for r in rows}
        return [found[i] for i in ids if i in found]

    def session_neighbors(
        self, ids: Sequence[str], radius: int
    ) -> dict[str, list[tuple[str, int]]]:
        if not ids or radius < 1:
            return {}
        with self._read() as conn:
            rows = reads.session_members(conn, self._visible, ids)
        return neighbors_in_sessions(rows, ids, radius)

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        if not ids:
            return {}
        with self._read() as conn:
            return reads.vectors(conn, self._visible, self.tenancy.tenant, ids)

    def exact_vectors(self) -> bool:
        return False  # the planner may answer from the HNSW index, whichever the table's size

    def find_duplicates(self, keys: Sequence[DedupKey]) -> dict[DedupKey, str]:
        with self._conn() as conn:
            return reads.find_duplicates(conn, self._visible, keys)

    def export(self, batch: int) -> Iterator[list[tuple[Memory, Vector | None]]]:
        return reads.exported(self._conn, self._visible, batch)

    def iter_contents(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        return reads.contents(self._conn, self._visible, batch)

    def _candidates_sql(self, request: CandidateRequest) -> tuple[str, dict[str, Any]]:
        where, params = q.filter_sql(request.filters, self._visible, self._own_index)
        # Under a filter narrower than the live rows, the postings' rows are read in score
        # order until enough pass, or the few rows the filter's indexed part admits first.
        live = res.live_rows_only(request.filters)
        narrowed = None if live else q.narrowing_sql(request.filters)
        words = ix.word_engine(
            self._visible, self._word_postings, narrowed, *self._rows_counted(), self._walled
        )
        asked = res.asked(request, self.channels)
        sql, more = q.candidates_sql(request, where, asked, q.readers(words))
        values: dict[str, Any] = {**params, **more}
        if request.query_vector is not None:
            values["qv"] = np.asarray(request.query_vector, np.float32)
        return sql, values

    def candidates(self, request: CandidateRequest) -> dict[str, list[ChannelCandidate]]:
        out = res.channels(request)
        if not res.asked(request, self.channels):
            return out  # no statement to send

        def run() -> list[Any]:
            sql, values = self._candidates_sql(request)
            with self._conn() as conn, self._plans.mode(conn, False):
                if request.query_vector is not None:
                    have = self._dimension(conn)
                    if have is not None and have != request.query_vector.shape[-1]:
                        raise EmbedderMismatchError(
                            f"query vector has {request.query_vector.shape[-1]} dimensions,"
                            f" the store's vectors have {have}"
                        )
                return conn.execute(sql, values).fetchall()

        for channel, rank, memory_id, score in self._postings_guard(run):
            out.setdefault(channel, []).append(ChannelCandidate(memory_id, rank, float(score)))
        return out

    def parallel_reads(self) -> bool:
        """From :data:`PARALLEL_READS_MIN_ROWS` memories seen, while this search is the only
        one in flight in the process: the word statement then takes long enough that
        running it beside the vector one pays for the second round trip, and the server has
        a core for it (a server answering several searches at once has none to spare)."""
        return threads.alone() and self._rows_counted()[0] >= PARALLEL_READS_MIN_ROWS

    def _rows_counted(self) -> tuple[int, int]:
        """The memories (forgotten ones too) of the namespaces the handle sees and of the
        table, from the word statistics, counted again after :data:`VISIBLE_ROWS_TTL_S`."""
        visible, table, at = self._visible_count
        if time.monotonic() - at < VISIBLE_ROWS_TTL_S:
            return visible, table
        with self._read() as conn:
            visible, table = ix.word_rows(conn, self._visible)
        self._visible_count = (visible, table, time.monotonic())
        return visible, table

    def search_rows(
        self,
        requests: Sequence[CandidateRequest],
        *,
        vectors: bool = False,
        neighbor_radius: int = 0,
        neighbor_depth: int = 0,
        candidate_vectors: bool = False,
    ) -> SearchRows:
        """One statement, sent in one round trip (autocommit: no BEGIN / COMMIT); with
        ``candidate_vectors``, every candidate's vector of the first request in it too (as
        the vector channel's completion reads them, :func:`queries.search_rows_sql`)."""
        vectors = vectors or candidate_vectors

        def run() -> tuple[list[bool], list[Any]]:
            blocks = [self._candidates_sql(r) for r in requests]
            sql, values = q.search_rows_sql(
                [b for b in blocks if b[0]],
                vectors=vectors,
                radius=max(neighbor_radius, 0),
                depth=neighbor_depth,
                rows_depth=ROWS_DEPTH,
                complete=candidate_vectors or (bool(requests) and "semantic" in requests[0].asks),
            )
            values.update(namespaces=self._visible, tenant=self.tenancy.tenant)
            exact = self._word_postings and res.words_only(requests)  # plans.GENERIC_WORDS
            with self._read() as conn:
                self._plans.apply(conn, self._visible, self._visible_count[0], self._own_index)
                narrowed = False
                try:
                    with (
                        self._plans.mode(conn, exact),
                        ix.near_memory(conn, requests, self._ef) as narrowed,
                    ):
                        # Binary: vectors as 1.5 KB of floats, not 4-6 KB of text to
                        # parse (a third of a 100k search's time); the same bits.
                        cursor = execute_named(conn, sql, values, binary=True, prepare=exact)
                    return [bool(b[0]) for b in blocks], cursor.fetchall()
                except psycopg.Error as exc:
                    if narrowed:  # the pipeline's connection: the pool replaces it
                        conn.close()
                    if not isinstance(exc, psycopg.errors.DataException) or (
                        "different vector dimensions" not in str(exc)
                    ):
                        raise
                    raise EmbedderMismatchError(
                        f"the query vector's dimensions differ from the store's vectors ({exc})"
                    ) from exc

        asked, rows = self._postings_guard(run)
        if rows and rows[0][0] == "fp":  # first in the statement's order
            self._fingerprint.verify(rows[0][4])
            rows = rows[1:]
        return res.search_rows(requests, asked, rows, vectors, neighbor_radius, neighbor_depth)

    def _postings_guard(self, run: Callable[[], T]) -> T:
        """``run()``, which builds and sends a statement; once more without the word
        postings if they were dropped since the handle opened (a statement that reads them
        first checks that they are still there, and refuses otherwise: ``WORDS_GONE``)."""
        try:
            return run()
        except psycopg.Error as exc:
            if exc.sqlstate != WORDS_GONE or not self._word_postings:
                raise
            self._word_postings = False
            return run()

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
