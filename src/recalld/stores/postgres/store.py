"""The PostgreSQL store: pgvector (HNSW, cosine), FTS5's tokens + GIN (ranked by FTS5's
BM25), pg_trgm, an entity array; a connection pool, every channel in one SQL statement,
tenants walled in twice (the store's ``WHERE`` clauses and Row-Level Security)."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from recalld import threads
from recalld.errors import EmbedderMismatchError, InvalidInputError, NotFoundError, StoreError
from recalld.lexical import tokenize_many
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
    day_counts,
    guard_public_methods,
    migration_key,
    near_ids,
    neighbors_in_sessions,
)
from recalld.stores.postgres import queries as q
from recalld.stores.postgres.migrations import (
    APP_ID,
    KEEP_VECTORS_INLINE,
    SCHEMA_VERSION,
    WORDS_GONE,
    migrate,
    postings_sql,
)
from recalld.stores.postgres.probe import check_vectors_once

T = TypeVar("T")
"""The channels this backend answers: all of them, one reader each (queries.READERS)."""

POOL_MAX = 8
"""Connections a store handle keeps at most (one per concurrently busy thread)."""
ROWS_DEPTH = 50
"""A search's one statement also returns the rows (and vectors) of the candidates ranked
within this in some channel, and of the top candidates' session neighbours; the pipeline
reads the few others it keeps in one or two more single-statement lookups. Rows cost the
client more than those round trips: reading every candidate's row (about 1,000 with the
neighbours of all 200 of the first channel list) took a 10k search 107 ms on average,
reading these 39-46 ms (docs/postgres.md)."""
EF_SEARCH = 100
"""HNSW candidates examined per vector search (pgvector's default is 40) of an index of up to
:data:`EF_REFERENCE_ROWS` rows, all of them the search's; see docs/design/architecture.md for
the recall measured against exact search."""
NEAR_MEMORY_EF_SEARCH = EF_SEARCH
"""HNSW candidates of a search from a stored memory's own vector for the few nearest
(``NearestAsk.near_memory``, the knowledge-update follow search): it starts on the
memory's own node, whose links are its nearest, so the candidates a question needs in a
large index (400 at 100k) only cost time."""
EF_REFERENCE_ROWS = 25_000
"""Past this many rows in the index searched, the candidates grow in proportion: a tenant's
own index of 100k rows found 0.89 of the exact top 10 with 100 candidates, 0.955 with 200
and 0.975 with 400 (4, 6 and 12 ms a statement; docs/benchmarks-scale.md)."""
EF_SEARCH_MAX = 1000
"""The most HNSW candidates examined. A tenant whose namespaces hold a share s of the
table's index examines ``1 / s`` times more. Under a filter, the graph search must pass over
the other tenants' nodes to find the tenant's: on 1M memories over 1,000 tenants, the tenant
holding 100k found 0.52 of the exact top 10 with 100 candidates, 0.84 with 400 and 0.96
with 1,000, in about the same time (110-120 ms: the iterative scan reads the same filtered
tuples). A small tenant's search is exact (the planner reads its rows by namespace)."""


OWN_INDEX_PREFIX = "memories_embedding_ns_"
"""A namespace's own vector index (:meth:`PostgresStore.build_own_vector_index`) is named
this plus a hash of the namespace (index names are at most 63 bytes)."""
OWN_INDEX_EF_CONSTRUCTION = 200
"""The build beam of a namespace's own vector index (pgvector's default is 64): the graph of
the 100k tenant in the 1M database then found 0.978 of 60 questions' exact 10 nearest at
``hnsw.ef_search`` 100 and 1.0 at 400, against 0.935 and 0.992 built at 64; the build took
78 s against 28-31 (docs/benchmarks-scale.md)."""
OWN_INDEX_BUILD_MEMORY = "512MB"
"""``maintenance_work_mem`` while building one: the graph of 100k vectors (about 200 MB)
then fits in memory, which makes the build several times faster."""


PARALLEL_READS_MIN_ROWS = 50_000
"""From this many memories in the namespaces a handle sees, a search reads its word channels
in a statement of their own, on a second connection, while it embeds the query and reads
the vector channels in another (:meth:`PostgresStore.parallel_reads`): the tenant of 100k in
the 1M database went from 154 / 235 to 103 / 191 ms (p50 / p95), a tenant of 900 gains
nothing from it (25.5 / 34.4 against 24.4 / 34.2 ms), the same top 10s either way."""
VISIBLE_ROWS_TTL_S = 60.0
"""How long a handle trusts its count of the memories it sees (for
:data:`PARALLEL_READS_MIN_ROWS`) before counting again."""
WORD_POSTINGS_ADVISED_ROWS = 50_000
"""``recalld status`` advises a tenant's word postings (``recalld postgres word-index``) from
this many memories: past it, a question's common words match tens of thousands of rows,
each read and scored by the word channel without them."""
OWN_INDEX_ADVISED_ROWS = 20_000
"""``recalld status`` advises a tenant's own vector index from this many memories, when the
table holds at least twice as many (a smaller share makes its vector searches walk past
more of other tenants' nodes)."""


def own_index_name(namespace: str) -> str:
    """The name of ``namespace``'s own vector index."""
    return OWN_INDEX_PREFIX + hashlib.sha256(namespace.encode()).hexdigest()[:20]


def ef_search(visible_rows: int, all_rows: int, own_index: bool = False) -> int:
    """HNSW candidates for a tenant whose namespaces hold ``visible_rows`` of the table's
    ``all_rows``, searching the table's index or (``own_index``) one of its own rows."""
    indexed = visible_rows if own_index else all_rows
    wanted = EF_SEARCH * max(1.0, indexed / EF_REFERENCE_ROWS)
    if not own_index and 0 < visible_rows < all_rows:
        wanted *= all_rows / visible_rows
    return min(EF_SEARCH_MAX, math.ceil(wanted))


_ts = codec.ts
_dt = codec.dt


def _pg_call(store: Any) -> AbstractContextManager[None]:
    """Public methods report database failures as :class:`StoreError`."""
    return _pg_errors(store.path)


_raising_store_errors = guard_public_methods(_pg_call)


@contextmanager
def _pg_errors(where: str) -> Iterator[None]:
    try:
        yield
    except psycopg.errors.DataException as exc:
        if "0x00" in str(exc):  # a NUL the facade's checks did not see: the same answer
            raise InvalidInputError(
                "text with a NUL character (U+0000) is neither stored nor searched; remove it"
            ) from None
        if "dimensions" in str(exc):
            raise EmbedderMismatchError(f"the store {where} refused a vector: {exc}") from exc
        raise StoreError(f"the store {where} failed ({exc})") from exc
    except (psycopg.Error, TimeoutError) as exc:
        raise StoreError(f"the store {where} failed ({exc}); check the server") from exc


def _redacted(dsn: str) -> str:
    """The DSN without a password, for messages."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in info.items())


@_raising_store_errors
class PostgresStore:
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
            self.path = _redacted(dsn)
        except psycopg.ProgrammingError as exc:
            raise StoreError(f"invalid PostgreSQL DSN: {exc}") from exc
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                self._check_foreign(conn)
                migrate(conn)
                # Before the first vector is written: a server whose pgvector cannot run
                # here fails in one sentence instead of dropping every connection.
                check_vectors_once(dsn, conn, self.path)
                # Whether the tenant, seen alone, has a vector index of its own, for the
                # handle's life (see build_own_vector_index).
                self._own_index = self._has_own_index(conn)
                # Whether its word postings answer the word channel (build_word_postings).
                self._word_postings = self._has_word_postings(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store {self.path}: {exc}") from exc
        self._load_types: list[int] = []
        self._deferring = False
        self._ef = EF_SEARCH
        """The HNSW candidates the handle's connections were given (see _ef_search)."""
        self._visible_count = (0, -math.inf)
        """(memories seen, when counted): see :meth:`_visible_rows`."""
        self._pool = ConnectionPool(
            dsn, min_size=1, max_size=POOL_MAX, configure=self._configure, open=True,
            timeout=30.0,
        )  # fmt: skip

    def _check_foreign(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a database whose ``memories`` table is not recalld's."""
        found = conn.execute(
            "SELECT to_regclass('memories') IS NOT NULL, to_regclass('recalld_meta') IS NOT NULL"
        ).fetchone()
        assert found is not None
        if found[0] and not found[1]:
            raise StoreError(
                f"{self.path} has a memories table of another program; refusing to touch it"
            )

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        register_vector(conn)
        # The second wall: Row-Level Security admits only these namespaces' rows.
        conn.execute(
            "SELECT set_config('recalld.namespaces', %s, false),"
            " set_config('hnsw.ef_search', %s, false),"
            " set_config('hnsw.iterative_scan', 'strict_order', false),"
            # JIT compiling a search's CTEs costs tens to hundreds of ms, never repaid here.
            " set_config('jit', 'off', false)",
            (",".join(self._visible), str(self._ef_search(conn))),
        )
        try:
            with conn.transaction():  # a savepoint: the settings above stay
                conn.execute(_CREATE_LOAD)
            if not self._load_types:
                self._load_types = [r[0] for r in conn.execute(_LOAD_TYPES).fetchall()]
        except psycopg.errors.InsufficientPrivilege:
            self._load_types = []  # no TEMP privilege: rows go in one statement each
        conn.commit()

    def _ef_search(self, conn: psycopg.Connection[Any]) -> int:
        """:func:`ef_search` for this tenant's share of the table when the connection is
        made (:data:`EF_SEARCH` before the statistics exist: a store not yet migrated);
        kept as the handle's, for :meth:`_near_memory`."""
        try:
            with conn.transaction():
                visible, table = self._word_rows(conn)
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
            return EF_SEARCH
        self._ef = ef_search(visible, table, self._own_index)
        return self._ef

    @contextmanager
    def _near_memory(
        self, conn: psycopg.Connection[Any], requests: Sequence[CandidateRequest]
    ) -> Iterator[None]:
        """Fewer HNSW candidates (:data:`NEAR_MEMORY_EF_SEARCH`) while ``requests``, all
        searches from a stored memory's vector, run on ``conn``; then the handle's again."""
        narrower = (all(r.near_memory for r in requests)
                    and self._ef > NEAR_MEMORY_EF_SEARCH)  # fmt: skip
        if narrower:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, false)",
                         (str(NEAR_MEMORY_EF_SEARCH),))  # fmt: skip
        try:
            yield
        finally:
            if narrower:
                conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(self._ef),))

    def _word_rows(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        """The memories (forgotten ones too) of the namespaces the handle sees, and of the
        whole table, from the word statistics (counts, behind no tenant wall)."""
        found = conn.execute(
            "SELECT coalesce(sum(rows) FILTER (WHERE namespace = ANY(%s)), 0),"
            " coalesce(sum(rows), 0) FROM lexical_stats",
            (list(self._visible),),
        ).fetchone()
        return (int(found[0]), int(found[1])) if found else (0, 0)

    def _has_own_index(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the handle sees one namespace alone and it has a valid own index."""
        if len(self._visible) != 1:
            return False  # an own index holds one namespace's rows: it cannot answer more
        return bool(_index_valid(conn, own_index_name(self._visible[0])))

    def _has_word_postings(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the handle sees one namespace alone and it keeps word postings."""
        if len(self._visible) != 1:
            return False  # a namespace's postings rank its own rows, not several's
        found = conn.execute("SELECT 1 FROM word_namespaces WHERE namespace = %s",
                             (self._visible[0],)).fetchone()  # fmt: skip
        return found is not None

    def advises_word_postings(self) -> bool:
        """Whether ``recalld status`` advises this tenant word postings (below)."""
        with self._read() as conn:
            memories, _ = self._word_rows(conn)
        return self._advises_word_postings(memories)

    def _advises_word_postings(self, memories: int) -> bool:
        return (not self._word_postings and len(self._visible) == 1
                and memories >= WORD_POSTINGS_ADVISED_ROWS)  # fmt: skip

    def _alone(self, what: str) -> str:
        """The handle's one namespace, for a build that serves a tenant seen alone (``what``
        names it); refused for a handle that also sees shared namespaces."""
        if len(self._visible) != 1:
            raise InvalidInputError(f"{what} for a tenant seen alone; open the store without"
                                    " shared namespaces")  # fmt: skip
        return self._visible[0]

    def build_word_postings(self, drop: bool = False) -> int:
        """Give the tenant word postings (``drop``: remove them), which the word channel
        then scores on (:func:`queries.top_words_ctes`); returns the postings written. Handles
        opened afterwards use them; triggers keep them in step with every write.

        Why: without them the word channel reads and scores every row holding a query
        word, tens of thousands for a common word in a tenant of 100k memories. The build
        holds writes to the memories table for its duration (SHARE lock; searches go on),
        so that no row is written between the listing of the tenant and its postings."""
        namespace = self._alone("word postings are")
        with self._conn() as conn:
            conn.execute("LOCK TABLE memories IN SHARE MODE")
            conn.execute("DELETE FROM word_postings WHERE namespace = %s", (namespace,))
            conn.execute("DELETE FROM word_namespaces WHERE namespace = %s", (namespace,))
            if drop:
                return 0
            conn.execute("INSERT INTO word_namespaces (namespace) VALUES (%s)", (namespace,))
            written = conn.execute(
                f"INSERT INTO word_postings {postings_sql('memories')}"
                " WHERE r.namespace = %s", (namespace,),
            ).rowcount  # fmt: skip
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            # Counting a word's rows then reads the index alone (its visibility map set).
            conn.execute("VACUUM (ANALYZE) word_postings")
        return written

    def build_own_vector_index(self, drop: bool = False) -> str:
        """Give the tenant a vector index of its own rows (``drop``: remove it); returns its
        name. Handles opened afterwards use it.

        Why: under the tenant filter, the HNSW index of the whole table passes over the
        other tenants' nodes to reach the tenant's; a tenant holding 100k of 1M memories
        found 0.95 of the exact top 10 with 1,000 candidates examined. An index of its own
        rows (a partial index, ``WHERE namespace = '<tenant>'``) is searched like a store of
        its own. Each statement of a handle using it states its namespace as a literal, so
        the planner can prove that the partial index applies in every plan, cached ones
        too. The build does not block writes (``CONCURRENTLY``); an interrupted one leaves
        an invalid index that no search uses and the next build replaces."""
        namespace = self._alone("an own vector index is")
        name = own_index_name(namespace)
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            valid = _index_valid(conn, name)
            if valid is not None and (drop or not valid):
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            if not drop:
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false)",
                             (OWN_INDEX_BUILD_MEMORY,))  # fmt: skip
                conn.execute(
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memories USING hnsw"
                    " (embedding vector_cosine_ops)"
                    f" WITH (ef_construction = {int(OWN_INDEX_EF_CONSTRUCTION)})"
                    f" WHERE namespace = {q.literal(namespace)}"
                )
        return name

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
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('recalld add ' || n, 0))"
                         " FROM (SELECT n FROM unnest(%s::text[]) AS n ORDER BY n) AS ordered",
                         (spaces,))  # fmt: skip
            found = already_stored(memories, partial(self._get_many, conn),
                                   partial(self._find_duplicates, conn), by_content)  # fmt: skip
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
        positions = self._positions(conn, memories, namespaces)
        if vectors is not None:
            self._ensure_dimension(conn, int(np.asarray(vectors).shape[-1]))
        tokens = tokenize_many([m.content for m in memories])
        rows = (
            (*_row(m, ns, pos), tokens[i], len(tokens[i]),
             None if vectors is None else np.asarray(vectors[i], np.float32))
            for i, (m, ns, pos) in enumerate(zip(memories, namespaces, positions, strict=True))
        )  # fmt: skip
        if not self._load_types:
            marks = ", ".join(["%s"] * (len(codec.COLUMN_NAMES) + 3))
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO memories ({_LOAD_COLUMNS}) VALUES ({marks})",
                                list(rows))  # fmt: skip
        else:
            self._copy_rows(conn, rows)
        if vectors is not None:
            self._mark_vectors(conn, set(namespaces))

    def _copy_rows(self, conn: psycopg.Connection[Any], rows: Iterator[tuple[Any, ...]]) -> None:
        with conn.cursor() as cur:
            with cur.copy(f"COPY {LOAD_TABLE} ({_LOAD_COLUMNS}, ord) FROM STDIN"
                          " (FORMAT BINARY)") as copy:  # fmt: skip
                copy.set_types(self._load_types)
                for i, row in enumerate(rows):
                    copy.write_row((*row, i))
            cur.execute(_FROM_LOAD)

    def _positions(
        self, conn: psycopg.Connection[Any], memories: Sequence[Memory], namespaces: list[str]
    ) -> list[int | None]:
        """Given positions, else the places after each session's last (sessions locked,
        in one statement; their last positions read in one more)."""
        sessions = sorted({(ns, m.session_id) for m, ns in zip(memories, namespaces, strict=True)
                           if m.session_id is not None and m.position is None})  # fmt: skip
        nxt: dict[tuple[str, str], int] = {}
        if sessions:
            keys = [f"{ns}\x1f{session}" for ns, session in sessions]
            conn.execute("SELECT count(pg_advisory_xact_lock(hashtext(k)))"
                         " FROM unnest(%s::text[]) WITH ORDINALITY AS s(k, o)",
                         (keys,))  # fmt: skip
            found = conn.execute(
                "SELECT s.o, (SELECT max(m.position) FROM memories m WHERE m.namespace = s.ns"
                " AND m.session_id = s.sid) FROM unnest(%s::text[], %s::text[])"
                " WITH ORDINALITY AS s(ns, sid, o)",
                ([ns for ns, _ in sessions], [sid for _, sid in sessions]),
            ).fetchall()
            for o, last in found:
                nxt[sessions[o - 1]] = 0 if last is None else last + 1
        out: list[int | None] = []
        for memory, ns in zip(memories, namespaces, strict=True):
            if memory.position is not None or memory.session_id is None:
                out.append(memory.position)
                continue
            key = (ns, memory.session_id)
            out.append(nxt[key])
            nxt[key] += 1
        return out

    def _vector_column(self, conn: psycopg.Connection[Any]) -> tuple[int | None, bool]:
        """The vector column's dimension (None before the first vector) and whether its
        HNSW index exists."""
        found = conn.execute(
            "SELECT atttypmod, to_regclass('memories_embedding') IS NOT NULL FROM pg_attribute"
            " WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
        ).fetchone()
        if found is None:
            return None, False
        return (None if found[0] < 0 else int(found[0])), bool(found[1])

    def _dimension(self, conn: psycopg.Connection[Any]) -> int | None:
        return self._vector_column(conn)[0]

    def _ensure_dimension(self, conn: psycopg.Connection[Any], dimension: int) -> None:
        """Give the vector column its dimension (and the HNSW index) on first use; build the
        index if it is missing (a bulk load that did not finish) and no load is running."""
        have, indexed = self._vector_column(conn)
        if have == dimension:
            if not indexed and not self._deferring:
                self._create_vector_index(conn)
            return
        if have is not None:
            raise EmbedderMismatchError(
                f"vectors of {dimension} dimensions, the store's have {have}; run a reindex"
            )
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('recalld_dimension'))")
        if self._dimension(conn) is None:
            conn.execute(f"ALTER TABLE memories ALTER COLUMN embedding TYPE vector({dimension}),"
                         f" {KEEP_VECTORS_INLINE}")  # fmt: skip
            if not self._deferring:
                self._create_vector_index(conn)

    def _create_vector_index(self, conn: psycopg.Connection[Any]) -> None:
        """The HNSW index, unless a bulk load (of this or another handle) is running: it
        builds the index itself when it ends."""
        free = conn.execute(
            f"SELECT pg_try_advisory_xact_lock_shared(hashtext('{BULK_LOCK}'))"
        ).fetchone()
        if free is not None and free[0]:
            conn.execute(_CREATE_VECTOR_INDEX)

    @contextmanager
    def bulk_load(self) -> Iterator[bool]:
        """Load many memories fast: while the block runs, :meth:`insert` leaves the HNSW
        index out and the block's end builds it over every row at once (with
        ``maintenance_work_mem`` raised to fit the graph, see :data:`BULK_INDEX_MEMORY_MAX`),
        several times faster than inserting each row into the graph. Only a store that has
        never held a vector is loaded so (else the index is kept and this changes nothing);
        yields whether the index was deferred. Nothing else changes: every insert checks and
        commits as usual, searches meanwhile scan the vectors exactly; a load cut short (a
        killed process) leaves the index to the next insert of vectors."""
        with _pg_errors(self.path), self._pool.connection() as conn:
            conn.autocommit = True
            try:
                if not self._start_bulk(conn):
                    yield False
                    return
                self._deferring = True
                try:
                    yield True
                finally:
                    self._deferring = False
                    self._finish_bulk(conn)
            finally:
                conn.autocommit = False

    def _start_bulk(self, conn: psycopg.Connection[Any]) -> bool:
        """Take the bulk-load lock (a session lock on this connection) if the store holds no
        vector and no index yet and no other load runs."""
        got = conn.execute(f"SELECT pg_try_advisory_lock(hashtext('{BULK_LOCK}'))").fetchone()
        if got is None or not got[0]:
            return False
        empty = conn.execute(
            "SELECT to_regclass('memories_embedding') IS NULL AND NOT EXISTS"
            f" ({_VECTOR_NAMESPACES})"
        ).fetchone()
        if empty is not None and empty[0]:
            return True
        conn.execute(_BULK_UNLOCK)
        return False

    def _finish_bulk(self, conn: psycopg.Connection[Any]) -> None:
        """Build the index over every row (other tenants' included), then free the lock."""
        try:
            dimension = self._dimension(conn)
            if dimension is not None:
                found = conn.execute(
                    "SELECT greatest((SELECT count(embedding) FROM memories),"
                    " (SELECT reltuples::bigint FROM pg_class WHERE oid = 'memories'::regclass)),"
                    " (SELECT setting::bigint * 1024 FROM pg_settings"
                    "  WHERE name = 'maintenance_work_mem')"
                ).fetchone()
                assert found is not None
                memory = max(_index_memory(int(found[0]), dimension), int(found[1]))
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false)",
                             (f"{memory // 1024}kB",))  # fmt: skip
                try:
                    conn.execute(_CREATE_VECTOR_INDEX)
                finally:
                    conn.execute("RESET maintenance_work_mem")
        finally:
            conn.execute(_BULK_UNLOCK)

    def replace(self, memory: Memory, vector: Vector | None) -> None:
        namespace = self.tenancy.namespace_for(memory.namespace)
        assignments = ", ".join(f"{c} = %s" for c in codec.COLUMN_NAMES[1:])
        with self._conn() as conn:
            pk = self._pks(conn, [memory.id]).get(memory.id)
            if pk is None:
                raise NotFoundError(f"unknown id: no memory with id {memory.id}")
            position = self._positions(conn, [memory], [namespace])[0]
            row = _row(memory, namespace, position)
            tokens = tokenize_many([memory.content])[0]
            conn.execute(f"UPDATE memories SET {assignments}, lex_tokens = %s, lex_length = %s"
                         " WHERE pk = %s", (*row[1:], tokens, len(tokens), pk))  # fmt: skip
            if vector is not None:
                self._ensure_dimension(conn, int(np.asarray(vector).shape[-1]))
                conn.execute("UPDATE memories SET embedding = %s WHERE pk = %s",
                             (np.asarray(vector, np.float32), pk))  # fmt: skip
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
            _set_meta(conn, "embedding_fingerprint", fingerprint)

    def any_vectors(self) -> bool:
        # Asked of the store's facts, not the rows: Row-Level Security hides other
        # tenants' rows from this handle, but one store has one embedder.
        with self._conn() as conn:
            return bool(conn.execute(_VECTOR_NAMESPACES).fetchall())

    def _mark_vectors(self, conn: psycopg.Connection[Any], namespaces: set[str]) -> None:
        """Record that these namespaces hold vectors (the fact behind :meth:`any_vectors`)."""
        for namespace in sorted(namespaces):
            _set_meta(conn, f"vectors:{namespace}", "1")

    def swap_vectors(self, vectors: Mapping[str, Vector], fingerprint: str) -> None:
        with self._conn() as conn:
            stored = _get_meta(conn, "embedding_fingerprint")
            holders = {str(r[0]).removeprefix("vectors:")
                       for r in conn.execute(_VECTOR_NAMESPACES).fetchall()}  # fmt: skip
            if fingerprint != stored and holders - set(self._visible):
                raise EmbedderMismatchError(
                    "other tenants' memories in this store have vectors of the current "
                    "embedder; one store has one embedder, so a reindex with another one "
                    "must be run for every tenant of the store at once"
                )
            pks = self._pks(conn, list(vectors))
            dimension = next((int(np.asarray(v).shape[-1]) for v in vectors.values()), None)
            if dimension is not None and self._dimension(conn) not in (None, dimension):
                conn.execute("UPDATE memories SET embedding = NULL WHERE namespace = ANY(%s)",
                             (self._visible,))  # fmt: skip
                conn.execute("DROP INDEX IF EXISTS memories_embedding")
                conn.execute(f"ALTER TABLE memories ALTER COLUMN embedding TYPE vector,"
                             f" {KEEP_VECTORS_INLINE}")  # fmt: skip
            if dimension is not None:
                self._ensure_dimension(conn, dimension)
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE memories SET embedding = %s, embedding_fingerprint = %s"
                    " WHERE pk = %s",
                    [(np.asarray(v, np.float32), fingerprint, pks[i])
                     for i, v in vectors.items() if i in pks],
                )  # fmt: skip
            _set_meta(conn, "embedding_fingerprint", fingerprint)
            self._mark_vectors(conn, set(self._visible))

    # -- reads ---------------------------------------------------------------------------

    def mark_migration(self, unfinished: bool) -> None:
        key = migration_key(self.tenancy.tenant)
        with self._conn() as conn:
            if unfinished:
                _set_meta(conn, key, "1")
            else:
                conn.execute("DELETE FROM recalld_meta WHERE key = %s", (key,))

    def unfinished_migration(self) -> bool:
        with self._read() as conn:
            return _unfinished_migration(conn, self._visible)

    def get_fingerprint(self) -> str | None:
        with self._read() as conn:  # checked before every search: one round trip
            return _get_meta(conn, "embedding_fingerprint")

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
        found = {r[0]: _memory(r) for r in rows}
        return [found[i] for i in ids if i in found]

    def session_neighbors(
        self, ids: Sequence[str], radius: int
    ) -> dict[str, list[tuple[str, int]]]:
        if not ids or radius < 1:
            return {}
        with self._read() as conn:
            rows = conn.execute(
                "SELECT m.id, m.namespace, m.session_id FROM memories m"
                " WHERE (m.namespace, m.session_id) IN (SELECT s.namespace, s.session_id"
                " FROM memories s WHERE s.id = ANY(%s) AND s.namespace = ANY(%s))"
                " AND m.forgotten_at IS NULL ORDER BY m.namespace, m.session_id, m.position, m.pk",
                (list(ids), self._visible),
            ).fetchall()
        return neighbors_in_sessions(rows, ids, radius)

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        if not ids:
            return {}
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, embedding FROM memories WHERE id = ANY(%s) AND namespace = ANY(%s)"
                " AND embedding IS NOT NULL ORDER BY namespace = %s",
                (list(ids), self._visible, self.tenancy.tenant),
                binary=True,  # as search_rows: floats, not text to parse
            ).fetchall()
        return {i: np.asarray(v.to_numpy(), dtype=np.float32) for i, v in rows}

    def exact_vectors(self) -> bool:
        return False  # the planner may answer from the HNSW index, whichever the table's size

    def find_duplicates(self, keys: Sequence[DedupKey]) -> dict[DedupKey, str]:
        with self._conn() as conn:
            return self._find_duplicates(conn, keys)

    def _find_duplicates(
        self, conn: psycopg.Connection[Any], keys: Sequence[DedupKey]
    ) -> dict[DedupKey, str]:
        wanted = set(keys)
        found: dict[DedupKey, str] = {}
        rows = conn.execute(
            "SELECT id, content_hash, scope, project, session_id, namespace FROM memories"
            " WHERE content_hash = ANY(%s) AND namespace = ANY(%s) AND forgotten_at IS NULL"
            " ORDER BY pk",
            (sorted({k[0] for k in keys}), self._visible),
        ).fetchall()
        for r in rows:
            key = (r[1], r[2], r[3], r[4], r[5])
            if key in wanted:
                found.setdefault(key, r[0])
        return found

    def export(self, batch: int) -> Iterator[list[tuple[Memory, Vector | None]]]:
        last = 0
        while True:
            with self._conn() as conn:
                rows = conn.execute(
                    f"SELECT m.pk, {q.SELECT_COLUMNS}, m.embedding FROM memories m"
                    " WHERE m.pk > %s AND m.namespace = ANY(%s) ORDER BY m.pk LIMIT %s",
                    (last, self._visible, batch),
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(_memory(r[1:-1]), None if r[-1] is None
                    else np.asarray(r[-1].to_numpy(), np.float32)) for r in rows]  # fmt: skip

    def iter_contents(self, batch: int) -> Iterator[list[tuple[str, str]]]:
        last = 0
        while True:
            with self._conn() as conn:
                rows = conn.execute(
                    "SELECT pk, id, content, embed_context FROM memories WHERE pk > %s"
                    " AND namespace = ANY(%s) ORDER BY pk LIMIT %s",
                    (last, self._visible, batch),
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(r[1], f"{r[3]}\n{r[2]}" if r[3] else r[2]) for r in rows]

    def _candidates_sql(self, request: CandidateRequest) -> tuple[str, dict[str, Any]]:
        where, params = q.filter_sql(request.filters, self._visible, self._own_index)
        # The postings find the namespace's best rows; under a filter narrower than the
        # live rows most of them would fail it and the rest be read from the table anyway,
        # so such a search scores every matching row there.
        postings = (self._visible[0] if self._word_postings
                    and _live_rows_only(request.filters) else None)  # fmt: skip
        sql, more = q.candidates_sql(request, where, _asked(request, self.channels), postings)
        values: dict[str, Any] = {**params, **more}
        if request.query_vector is not None:
            values["qv"] = np.asarray(request.query_vector, np.float32)
        return sql, values

    def candidates(self, request: CandidateRequest) -> dict[str, list[ChannelCandidate]]:
        out = _channels(request)
        if not _asked(request, self.channels):
            return out  # no statement to send

        def run() -> list[Any]:
            sql, values = self._candidates_sql(request)
            with self._conn() as conn:
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
        return threads.alone() and self._visible_rows() >= PARALLEL_READS_MIN_ROWS

    def _visible_rows(self) -> int:
        """The memories (forgotten ones too) of the namespaces the handle sees, from the word
        statistics, counted again after :data:`VISIBLE_ROWS_TTL_S`."""
        counted, at = self._visible_count
        if time.monotonic() - at < VISIBLE_ROWS_TTL_S:
            return counted
        with self._read() as conn:
            visible, _ = self._word_rows(conn)
        self._visible_count = (visible, time.monotonic())
        return visible

    def search_rows(
        self,
        requests: Sequence[CandidateRequest],
        *,
        vectors: bool = False,
        neighbor_radius: int = 0,
        neighbor_depth: int = 0,
    ) -> SearchRows:
        """One statement, sent in one round trip (autocommit: no BEGIN / COMMIT)."""

        def run() -> tuple[list[bool], list[Any]]:
            blocks = [self._candidates_sql(r) for r in requests]
            sql, values = q.search_rows_sql(
                [b for b in blocks if b[0]], vectors=vectors, radius=max(neighbor_radius, 0),
                depth=neighbor_depth, rows_depth=ROWS_DEPTH)  # fmt: skip
            values.update(namespaces=self._visible, tenant=self.tenancy.tenant)
            with self._read() as conn, self._near_memory(conn, requests):
                try:
                    # Binary results: vectors come as 1.5 KB of floats, not 4-6 KB of text
                    # to parse (a third of a 100k search's time); floats are the same bits.
                    return [bool(b[0]) for b in blocks], conn.execute(
                        sql, values, binary=True).fetchall()  # fmt: skip
                except psycopg.errors.DataException as exc:
                    if "different vector dimensions" not in str(exc):
                        raise
                    raise EmbedderMismatchError(
                        f"the query vector's dimensions differ from the store's vectors ({exc})"
                    ) from exc

        asked, rows = self._postings_guard(run)
        return _search_rows(requests, asked, rows, vectors, neighbor_radius, neighbor_depth)

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

    def stats(self) -> StoreStats:
        with self._conn() as conn:
            one = conn.execute(
                "SELECT count(*), count(forgotten_at), count(DISTINCT session_id),"
                " min(ref_time), max(ref_time), count(embedding) FROM memories"
                " WHERE namespace = ANY(%s)",
                (self._visible,),
            ).fetchone()
            assert one is not None
            types = conn.execute(
                "SELECT type, count(*) FROM memories WHERE namespace = ANY(%s)"
                " AND forgotten_at IS NULL GROUP BY type",
                (self._visible,),
            ).fetchall()
            by_type = {str(t): int(n) for t, n in types}
            sources = conn.execute(
                "SELECT source_kind, count(*) FROM memories WHERE namespace = ANY(%s)"
                " AND forgotten_at IS NULL GROUP BY source_kind",
                (self._visible,),
            ).fetchall()
            days = conn.execute(
                "SELECT floor(created_at / 86400)::bigint AS day, count(*) FROM memories"
                " WHERE namespace = ANY(%s) GROUP BY day ORDER BY day",
                (self._visible,),
            ).fetchall()
            size = conn.execute("SELECT pg_total_relation_size('memories')").fetchone()
            fingerprint = _get_meta(conn, "embedding_fingerprint")
            unfinished = _unfinished_migration(conn, self._visible)
            _, table_rows = self._word_rows(conn)
        advice: tuple[str, ...] = ()
        if (not self._own_index and len(self._visible) == 1
                and OWN_INDEX_ADVISED_ROWS <= one[0] <= table_rows // 2):  # fmt: skip
            advice += (f"this tenant's vector searches walk the index of all {table_rows:,}"
                       " memories of the database: `recalld postgres tenant-index` gives it"
                       " one of its own (docs/postgres.md)",)  # fmt: skip
        if self._advises_word_postings(one[0]):
            advice += (f"this tenant's word searches score every one of its {one[0]:,}"
                       " memories that holds a query word: `recalld postgres word-index`"
                       " scores them on an index instead (docs/postgres.md)",)  # fmt: skip
        return StoreStats(
            path=self.path, memories=one[0] - one[1], forgotten=one[1], with_vectors=one[5],
            fingerprint=fingerprint, schema_version=SCHEMA_VERSION,
            size_bytes=int(size[0]) if size else 0, by_type=by_type, sessions=one[2],
            oldest=_dt(one[3]), newest=_dt(one[4]), unfinished_migration=unfinished,
            by_source={str(k): int(n) for k, n in sources}, added_by_day=day_counts(days),
            vector_index="own" if self._own_index else "table", advice=advice,
        )  # fmt: skip

    # -- indexed source files --------------------------------------------------------------

    def save_source_root(self, root: SourceRoot) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO source_roots (namespace, path, globs, added_at, indexed_at)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, path) DO UPDATE SET"
                " globs = excluded.globs,"
                " indexed_at = COALESCE(excluded.indexed_at, source_roots.indexed_at)",
                (self.tenancy.tenant, root.path, json.dumps(list(root.globs)),
                 datetime.now(UTC).timestamp(), _ts(root.indexed_at)),
            )  # fmt: skip

    def source_roots(self) -> list[SourceRoot]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT path, globs, indexed_at FROM source_roots WHERE namespace = %s"
                " ORDER BY path",
                (self.tenancy.tenant,),
            ).fetchall()
        return [SourceRoot(r[0], tuple(json.loads(r[1])), _dt(r[2])) for r in rows]

    def source_files(self, roots: Sequence[str] | None = None) -> list[SourceFile]:
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
        return [SourceFile(path=r[0], root=r[1], size=r[2], mtime_ns=r[3], status=r[4],
                           content_hash=r[5], chunker=r[6], error=r[7], indexed_at=_dt(r[8]),
                           chunks=r[9]) for r in rows]  # fmt: skip

    def save_source_files(self, files: Sequence[SourceFile]) -> None:
        with self._conn() as conn, conn.cursor() as cur:
            cur.executemany(_UPSERT_FILE, [self._file_row(f) for f in files])

    def _file_row(self, f: SourceFile) -> tuple[Any, ...]:
        return (self.tenancy.tenant, f.path, f.root, f.size, f.mtime_ns, f.status,
                f.content_hash, f.chunker, f.error, _ts(f.indexed_at))  # fmt: skip

    def replace_file_chunks(
        self, file: SourceFile, memories: Sequence[Memory], vectors: Vector | None
    ) -> None:
        own = self.tenancy.tenant
        with self._conn() as conn:
            conn.execute(_DELETE_CHUNKS, (own, file.path))
            self._insert_rows(conn, [replace(m, namespace=own) for m in memories], vectors)
            conn.execute(_UPSERT_FILE, self._file_row(file))

    def remove_source_files(self, paths: Sequence[str]) -> int:
        deleted = 0
        own = self.tenancy.tenant
        with self._conn() as conn:
            for path in paths:
                deleted += conn.execute(_DELETE_CHUNKS, (own, path)).rowcount
                conn.execute(
                    "DELETE FROM source_files WHERE namespace = %s AND path = %s", (own, path)
                )
        return deleted

    # -- API keys (across tenants) ---------------------------------------------------------

    def add_key(self, key: ApiKey, secret_hash: str) -> None:
        created = (key.created_at or datetime.now(UTC)).timestamp()
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO api_keys VALUES (%s, %s, %s, %s, %s, %s, %s, NULL)",
                (key.id, secret_hash, key.tenant, list(key.shared), key.admin, key.label,
                 created),
            )  # fmt: skip

    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        with self._conn() as conn:
            row = conn.execute(f"SELECT {_KEY_COLUMNS}, secret_hash FROM api_keys WHERE id = %s",
                               (key_id,)).fetchone()  # fmt: skip
        return None if row is None else (_api_key(row), str(row[7]))

    def list_keys(self) -> list[ApiKey]:
        with self._conn() as conn:
            rows = conn.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
            return [_api_key(r) for r in rows.fetchall()]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        with self._conn() as conn:
            done = conn.execute(
                "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
                (at.timestamp(), key_id),
            )
            return done.rowcount > 0

    def active_keys(self) -> int:
        with self._conn() as conn:
            found = conn.execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")
            row = found.fetchone()
            return int(row[0]) if row else 0

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
        return [_memory(r) for r in rows]


BULK_LOCK = "recalld_bulk_load"
"""Advisory lock held by a running :meth:`PostgresStore.bulk_load` (a session lock)."""
_BULK_UNLOCK = f"SELECT pg_advisory_unlock(hashtext('{BULK_LOCK}'))"
INDEX_BYTES_PER_ROW = 832
"""pgvector's in-memory HNSW graph holds about ``4 x dimension + 832`` bytes per row (measured:
at 384 dimensions 64 MiB held 28,371 rows, 2,365 bytes each)."""
BULK_INDEX_MEMORY_MAX = 4 << 30
"""At most this much ``maintenance_work_mem`` for the index build at the end of a bulk load
(the graph of 1M 384-dimension vectors needs about 2.3 GiB); a server set higher keeps
its own."""
_CREATE_VECTOR_INDEX = (
    "CREATE INDEX IF NOT EXISTS memories_embedding ON memories"
    " USING hnsw (embedding vector_cosine_ops)"
)


def _index_memory(rows: int, dimension: int) -> int:
    """Bytes of ``maintenance_work_mem`` for building the HNSW graph of ``rows`` vectors in
    memory (pgvector builds much faster when it fits), between 64 MiB and the cap."""
    need = int(rows * (dimension * 4 + INDEX_BYTES_PER_ROW) * 1.25)
    return max(64 << 20, min(need, BULK_INDEX_MEMORY_MAX))


LOAD_TABLE = "recalld_load"
"""Each connection's temporary table that :meth:`PostgresStore.insert` copies rows into."""
_LOAD_COLUMNS = f"{codec.COLUMNS}, lex_tokens, lex_length, embedding"
_CREATE_LOAD = (
    f"CREATE TEMP TABLE IF NOT EXISTS {LOAD_TABLE} ON COMMIT DELETE ROWS AS SELECT"
    f" {codec.COLUMNS}, lex_tokens, lex_length, embedding::vector AS embedding,"
    " 0::bigint AS ord FROM memories WITH NO DATA"
)
_LOAD_TYPES = (
    f"SELECT atttypid::int FROM pg_attribute WHERE attrelid = 'pg_temp.{LOAD_TABLE}'::regclass"
    " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)
_FROM_LOAD = (
    f"WITH batch AS (DELETE FROM {LOAD_TABLE} RETURNING *) INSERT INTO memories"
    f" ({_LOAD_COLUMNS}) SELECT {_LOAD_COLUMNS} FROM batch ORDER BY ord"
)
_UPSERT_FILE = (
    "INSERT INTO source_files (namespace, path, root, size, mtime_ns, status, content_hash,"
    " chunker, error, indexed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (namespace, path) DO UPDATE SET root = excluded.root, size = excluded.size,"
    " mtime_ns = excluded.mtime_ns, status = excluded.status,"
    " content_hash = excluded.content_hash, chunker = excluded.chunker,"
    " error = excluded.error, indexed_at = excluded.indexed_at"
)
_VECTOR_NAMESPACES = "SELECT key FROM recalld_meta WHERE key LIKE 'vectors:%'"
_DELETE_CHUNKS = (
    "DELETE FROM memories WHERE namespace = %s AND source_kind = 'file' AND type = 'chunk'"
    " AND source_path = %s"
)


_KEY_COLUMNS = "id, tenant, shared, admin, label, created_at, revoked_at"


def _api_key(r: Sequence[Any]) -> ApiKey:
    return ApiKey(id=r[0], tenant=r[1], shared=tuple(r[2] or ()), admin=bool(r[3]), label=r[4],
                  created_at=_dt(r[5]), revoked_at=_dt(r[6]))  # fmt: skip


def _get_meta(conn: psycopg.Connection[Any], key: str) -> str | None:
    found = conn.execute("SELECT value FROM recalld_meta WHERE key = %s", (key,)).fetchone()
    return None if found is None else str(found[0])


def _live_rows_only(filters: MemoryFilter) -> bool:
    """Whether ``filters`` asks for no more than the live memories (a search's default):
    nothing narrows them but which of forgotten and superseded ones it includes."""
    return replace(filters, include_forgotten=False, include_superseded=True) == MemoryFilter()


def _index_valid(conn: psycopg.Connection[Any], name: str) -> bool | None:
    """Whether the index ``name`` may answer queries (False: a build was interrupted); None
    when there is none."""
    found = conn.execute(
        "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
        " WHERE c.relname = %s",
        (name,),
    ).fetchone()
    return None if found is None else bool(found[0])


def _unfinished_migration(conn: psycopg.Connection[Any], namespaces: Sequence[str]) -> bool:
    keys = [migration_key(n) for n in namespaces]
    found = conn.execute("SELECT 1 FROM recalld_meta WHERE key = ANY(%s)", (keys,)).fetchone()
    return found is not None


def _set_meta(conn: psycopg.Connection[Any], key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO recalld_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE"
        " SET value = excluded.value",
        (key, value),
    )


def _asked(request: CandidateRequest, answered: Collection[str] = q.READERS) -> list[str]:
    """The channels of ``request``'s asks that the store answers, in the request's order."""
    return [name for name in request.asks if name in answered]


def _channels(request: CandidateRequest) -> dict[str, list[ChannelCandidate]]:
    """The channels a request runs, empty: each is present in the answer even unmatched."""
    return {name: [] for name in _asked(request)}


def _search_rows(
    requests: Sequence[CandidateRequest],
    ran: Sequence[bool],
    rows: Sequence[Sequence[Any]],
    vectors: bool,
    radius: int,
    depth: int,
) -> SearchRows:
    """Sort the statement's ``hit`` / ``near`` / ``row`` rows into :class:`SearchRows`."""
    sent = [i for i, r in enumerate(ran) if r]  # the statement numbers only requests with SQL
    channels = [_channels(r) for r in requests]
    memories: dict[str, Memory] = {}
    found: dict[str, Vector] = {}
    neighbors: dict[str, list[tuple[str, int]]] = {}
    for kind, req, channel, n, memory_id, score, *rest in rows:
        if kind == "hit":
            channels[sent[req]].setdefault(channel, []).append(
                ChannelCandidate(memory_id, n, float(score))
            )
        elif kind == "near":
            neighbors.setdefault(channel, []).append((memory_id, int(n)))
        else:
            memories[memory_id] = _memory(rest[:-1])
            if vectors and rest[-1] is not None:
                found[memory_id] = np.asarray(rest[-1].to_numpy(), dtype=np.float32)
    near = near_ids(channels[0], depth) if channels and radius > 0 else []
    for memory_id in near:  # in a session with no other live member: no neighbours
        memory = memories.get(memory_id)
        if memory is not None and memory.session_id is not None and memory.forgotten_at is None:
            neighbors.setdefault(memory_id, [])
    result = SearchRows(tuple(channels), memories, {}, neighbors, frozenset(near))
    asked = result.candidate_ids  # a neighbour's vector came along in its row: not asked for
    return replace(result, vectors={i: v for i, v in found.items() if i in asked})


_VALUES = codec.Values(
    list_out=list, list_in=tuple, mapping_out=lambda mapping: Jsonb(dict(mapping)),
    mapping_in=dict,
)  # fmt: skip
"""Lists as ``text[]``, mappings as ``jsonb``."""


def _row(memory: Memory, namespace: str, position: int | None) -> tuple[Any, ...]:
    return codec.encode(memory, namespace, position, _VALUES)


def _memory(r: Sequence[Any]) -> Memory:
    return codec.decode(r, _VALUES)


__all__ = ["APP_ID", "PostgresStore"]
