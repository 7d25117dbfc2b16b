"""The PostgreSQL store's indexes: the table's HNSW index (built at first use, or once at
the end of a bulk load), a tenant's own vector index and word postings (built on demand:
``recalld postgres tenant-index|word-index``), and the HNSW candidates a search examines.

Invariants: a build serves one tenant seen alone (its namespace); nothing here reads a
memory's content; what a handle uses is decided when it opens (:class:`Indexes`), so a
build or a drop changes only handles opened afterwards (a dropped word index is also
noticed by the statement that reads it, see ``migrations.WORDS_GONE``)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from recalld.errors import InvalidInputError
from recalld.stores.base import CandidateRequest
from recalld.stores.postgres import ranked, word_sql
from recalld.stores.postgres.migrations import postings_sql
from recalld.stores.postgres.word_filtered import FilteredPostings

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
and 0.975 with 400 (4, 6 and 12 ms a statement; docs/design/scale-history.md)."""
EF_SEARCH_MAX = 1000
"""The most HNSW candidates examined. A tenant whose namespaces hold a share s of the
table's index examines ``1 / s`` times more. Under a filter, the graph search must pass over
the other tenants' nodes to find the tenant's: on 1M memories over 1,000 tenants, the tenant
holding 100k found 0.52 of the exact top 10 with 100 candidates, 0.84 with 400 and 0.96
with 1,000, in about the same time (110-120 ms: the iterative scan reads the same filtered
tuples). A small tenant's search is exact (the planner reads its rows by namespace)."""

OWN_INDEX_PREFIX = "memories_embedding_ns_"
"""A namespace's own vector index (:func:`build_own_vector_index`) is named this plus a
hash of the namespace (index names are at most 63 bytes)."""
OWN_INDEX_EF_CONSTRUCTION = 200
"""The build beam of a namespace's own vector index (pgvector's default is 64): the graph of
the 100k tenant in the 1M database then found 0.978 of 60 questions' exact 10 nearest at
``hnsw.ef_search`` 100 and 1.0 at 400, against 0.935 and 0.992 built at 64; the build took
78 s against 28-31 (docs/design/scale-history.md)."""
WIDE_BEAM_REFERENCE_ROWS = 40_000
""":data:`EF_REFERENCE_ROWS` for a tenant's own index built with a beam of at least
:data:`OWN_INDEX_EF_CONSTRUCTION`: its graph finds the same share of the nearest with fewer
candidates, so they grow in proportion only past this many rows. The 100k tenant's own
index in the 1M database (built at 200), recall@10 of the search statement against exact
cosine on two samples of 100 questions (seeds 7 and 11; 2026-11-29): 0.954 / 0.958 at 100
candidates, 0.987 / 0.987 at 200, **0.995 / 0.993 at 250** (recall@40 0.987 / 0.990), 0.995
/ 0.996 at 300, 0.997 / 0.997 at 400 (the reference of 25k rows asked 400), the same
whichever the LIMIT asked (26, 56, 216). A default hybrid search's (LIMIT 216, 200 kept:
0.938 of the exact 200 at 250, 0.975 at 400) ran 3.4 ms against 5.5 (execution, the two
alternated question by question, both samples), its whole search statement 2.4 ms less a
search; the hybrid top 10 the same ids for 99 of 100 questions
(docs/design/postgres-statements.md). An index built with pgvector's default beam keeps
the 25k rows: the same graph built at 64 found 0.935 at 100 and 0.992 at 400."""
PGVECTOR_EF_CONSTRUCTION = 64
"""pgvector's build beam when an index states none (its ``ef_construction`` default)."""
OWN_INDEX_BUILD_MEMORY = "512MB"
"""``maintenance_work_mem`` while building one: the graph of 100k vectors (about 200 MB)
then fits in memory, which makes the build several times faster."""

WORD_POSTINGS_ADVISED_ROWS = 10_000
"""A tenant's word postings are built by the write that takes it past this many memories
(:mod:`.words_due`), and ``recalld status`` advises them (``recalld postgres word-index``)
from it for a tenant that has none: without them the word channel reads and scores every
row holding a question's word (as the application's role, every row of the tenant:
Row-Level Security keeps the table's word index out of reach). A one-tenant store of 10k, as
``recalld_app`` (``recalld bench scale --sizes 10k --backends postgres --clients 0``, two
pairs alternated, 2026-11-29, load 1.0-1.9): hybrid p50 / p95 65.2 / 90.9 and 54.7 / 77.1
ms without them, 34.3 / 45.1 and 39.9 / 55.6 with them (the word statement 47 -> 13 ms of
execution); 32 clients through ``recalld serve --workers 2`` held 19.9 -> 34.7 searches/s
within p99 150 ms. At 3k: 40.3 / 53.1 against 38.0 / 50.9 and 38.1 / 49.1, too little for
a build. Their results are the same either way."""
OWN_INDEX_ADVISED_ROWS = 20_000
"""``recalld status`` advises a tenant's own vector index from this many memories, when the
table holds at least twice as many (a smaller share makes its vector searches walk past
more of other tenants' nodes)."""

BULK_LOCK = "recalld_bulk_load"
"""Advisory lock held by a running bulk load (a session lock)."""
BULK_UNLOCK = f"SELECT pg_advisory_unlock(hashtext('{BULK_LOCK}'))"
INDEX_BYTES_PER_ROW = 832
"""pgvector's in-memory HNSW graph holds about ``4 x dimension + 832`` bytes per row (measured:
at 384 dimensions 64 MiB held 28,371 rows, 2,365 bytes each)."""
BULK_INDEX_MEMORY_MAX = 4 << 30
"""At most this much ``maintenance_work_mem`` for the index build at the end of a bulk load
(the graph of 1M 384-dimension vectors needs about 2.3 GiB); a server set higher keeps
its own."""
CREATE_VECTOR_INDEX = (
    "CREATE INDEX IF NOT EXISTS memories_embedding ON memories"
    " USING hnsw (embedding vector_cosine_ops)"
)
VECTOR_NAMESPACES = "SELECT key FROM recalld_meta WHERE key LIKE 'vectors:%'"
"""The namespaces recorded as holding vectors (one ``recalld_meta`` key each)."""

Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class Indexes:
    """Which of its own indexes a handle's tenant has, read once when the handle opens."""

    own_beam: int
    """The build beam (``ef_construction``) of its own vector index (0: it has none)."""
    word_postings: bool
    """Word postings that answer its word channel (:func:`.word_sql.top_words_ctes`)."""
    ranked: bool = False
    """A BM25 index of its words that picks the postings' winners (:mod:`.ranked`)."""

    @property
    def own_vectors(self) -> bool:
        """A valid vector index of the tenant's rows (the handle then states its namespace as
        a literal, and examines the candidates its own rows call for)."""
        return self.own_beam > 0

    @classmethod
    def read(cls, conn: Conn, visible: Sequence[str]) -> Indexes:
        """Both, for a handle that sees ``visible``: only a tenant seen alone has either
        (an own index, or postings, rank one namespace's rows, not several's)."""
        if len(visible) != 1:
            return cls(0, False)
        posted = conn.execute(
            "SELECT 1 FROM word_namespaces WHERE namespace = %s", (visible[0],)
        ).fetchone()
        beam = own_index_beam(conn, own_index_name(visible[0]))
        if posted is None:
            return cls(beam, False)
        return cls(beam, True, ranked.is_ranked(conn, visible[0]))


@contextmanager
def near_memory(conn: Conn, requests: Sequence[CandidateRequest], handle_ef: int) -> Iterator[bool]:
    """Fewer HNSW candidates (:data:`NEAR_MEMORY_EF_SEARCH`) while ``requests``, all
    searches from a stored memory's vector, run on ``conn``; then the handle's
    (``handle_ef``) again. Those two statements go in the same round trip as the search
    (a pipeline), not in two more (0.96 round trips a search of the tenant of 901,
    2026-11-28). Yields whether it narrowed: a failed pipeline skips the reset, and psycopg
    counts its statements prepared, so the caller closes such a connection."""
    fewer = NEAR_MEMORY_EF_SEARCH
    narrower = all(r.near_memory for r in requests) and handle_ef > fewer
    if not narrower:
        yield False
        return
    with conn.pipeline():
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(fewer),))
        try:
            yield True
        finally:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(handle_ef),))


SCAN_ROWS_PER_NAMESPACE = 3_000
"""Up to this many memories seen per namespace seen (and a small share of the table:
:func:`word_engine`), the word channel scores them in one pass (:func:`.word_sql.scan_ctes`)
instead of reading the GIN index once per phrase and namespace. Server CPU of the word
statement in the 1M database of 1,000 tenants, 40 questions: one namespace of 901 rows
6-8 ms against 19-25 through the index, the 100k tenant 419-506 against 83-86 (20
questions), so about 3.4 ms + 4.6 us a row against 21 ms + 0.6 us a row, equal near 4,500
rows; the index reads grow with the namespaces seen (one read per phrase and namespace),
the pass with the rows: 2, 4, 8 and 16 namespaces (1,802 to 14,416 rows) 14-16 against
39-46, 22-28 against 70-75, 44-53 against 121-167, 86-93 against 242-281 ms; the same rows
and scores for every question (docs/design/scale-history.md)."""
SCAN_MAX_ROWS = 15_000
"""The one pass is never chosen past this many memories seen (about the most measured,
16 namespaces of 901)."""


def scans_rows(visible_rows: int, namespaces: int) -> bool:
    """Whether the word channel of a handle seeing ``namespaces`` namespaces holding
    ``visible_rows`` memories is cheaper as one pass over them than as the GIN index's reads
    (:data:`SCAN_ROWS_PER_NAMESPACE`, :data:`SCAN_MAX_ROWS`)."""
    return visible_rows <= min(SCAN_MAX_ROWS, SCAN_ROWS_PER_NAMESPACE * max(namespaces, 1))


SCAN_TABLE_SHARE = 10
"""The word channel reads a tenant's own rows (:data:`.word_sql.TENANT_ROWS`) only when the
table holds at least this many times as many: the GIN index's entries for a common word
then span mostly other tenants' rows. On the 1M database of 1,000 tenants, a tenant of 901
memories: 7.3 ms a word statement against 21-25 through the index, the same rows and scores
for 100 of 100 questions (docs/design/scale-history.md)."""


def word_engine(
    visible: Sequence[str],
    posted: bool,
    narrowed: str | None,
    visible_rows: int,
    table_rows: int,
    walled: bool = False,
    ranked: bool = False,
) -> word_sql.WordEngine:
    """The word channel's engine for a handle that sees ``visible`` (holding
    ``visible_rows`` of the table's ``table_rows`` memories): its word postings when it has
    them (``posted``), the best rows read first when the search's filter admits every live
    row (``narrowed`` None), else rows read in score order until enough pass, or the rows
    the filter's indexed conditions ``narrowed`` admit, when few
    (:mod:`.word_filtered`); its own rows, tested one by one, when they are few for the
    namespaces seen (:func:`scans_rows`) and a small share of the table
    (:data:`SCAN_TABLE_SHARE`), or whenever the tenant wall binds the handle's role
    (``walled``, :func:`walled`); otherwise the GIN index, once per phrase and namespace.
    ``ranked``: a BM25 index's best were read for the search (:mod:`.ranked`), and only
    their postings are scored, under filters no narrower than the live memories."""
    if posted:
        if narrowed is None:
            if ranked:
                return word_sql.RankedPostings(visible[0])
            return word_sql.Postings(visible[0])
        return FilteredPostings(visible[0], narrowed)
    scan = scans_rows(visible_rows, len(visible))
    if walled or (scan and visible_rows * SCAN_TABLE_SHARE <= table_rows):
        return word_sql.TENANT_ROWS
    return word_sql.EVERY_ROW


def walled(conn: Conn) -> bool:
    """Whether Row-Level Security binds ``conn``'s role (neither a superuser nor BYPASSRLS;
    the tables force it on their owner). Beneath the wall the planner makes only leakproof
    tests index conditions, and the GIN index's containment (``@>``) is not one: each of
    its reads is then a scan of the whole table (``recalld_lex_rows``, one word of the
    100k tenant in the 1M database: 1,748 ms against 55), so the word channel tests the
    rows seen, read by their namespace, in one pass instead."""
    found = conn.execute(
        "SELECT NOT (rolsuper OR rolbypassrls) FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    return bool(found and found[0])


def own_index_name(namespace: str) -> str:
    """The name of ``namespace``'s own vector index."""
    return OWN_INDEX_PREFIX + hashlib.sha256(namespace.encode()).hexdigest()[:20]


def ef_search(visible_rows: int, all_rows: int, own_index: bool = False, beam: int = 0) -> int:
    """HNSW candidates for a tenant whose namespaces hold ``visible_rows`` of the table's
    ``all_rows``, searching the table's index or (``own_index``) one of its own rows, built
    with the beam ``beam`` (:data:`WIDE_BEAM_REFERENCE_ROWS`)."""
    indexed = visible_rows if own_index else all_rows
    wide = own_index and beam >= OWN_INDEX_EF_CONSTRUCTION
    reference = WIDE_BEAM_REFERENCE_ROWS if wide else EF_REFERENCE_ROWS
    wanted = EF_SEARCH * max(1.0, indexed / reference)
    if not own_index and 0 < visible_rows < all_rows:
        wanted *= all_rows / visible_rows
    return min(EF_SEARCH_MAX, math.ceil(wanted))


def handle_ef_search(conn: Conn, visible: Sequence[str], own_beam: int) -> int:
    """:func:`ef_search` for the share of the table the namespaces ``visible`` hold, on
    their own index built with the beam ``own_beam`` (0: the table's index;
    :data:`EF_SEARCH` before the statistics exist: a store not yet migrated)."""
    try:
        with conn.transaction():
            visible_rows, table = word_rows(conn, visible)
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
        return EF_SEARCH
    return ef_search(visible_rows, table, own_beam > 0, own_beam)


def word_rows(conn: Conn, visible: Sequence[str]) -> tuple[int, int]:
    """The memories (forgotten ones too) of the namespaces ``visible``, and of the whole
    table, from the word statistics (counts, behind no tenant wall)."""
    found = conn.execute(
        "SELECT coalesce(sum(rows) FILTER (WHERE namespace = ANY(%s)), 0),"
        " coalesce(sum(rows), 0) FROM lexical_stats",
        (list(visible),),
    ).fetchone()
    return (int(found[0]), int(found[1])) if found else (0, 0)


def index_valid(conn: Conn, name: str) -> bool | None:
    """Whether the index ``name`` may answer queries (False: a build was interrupted); None
    when there is none."""
    found = conn.execute(
        "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
        " WHERE c.relname = %s",
        (name,),
    ).fetchone()
    return None if found is None else bool(found[0])


def own_index_beam(conn: Conn, name: str) -> int:
    """The build beam (``ef_construction``) of the valid index ``name``: as its options
    state it, else pgvector's default; 0 when there is no valid index of that name."""
    found = conn.execute(
        "SELECT i.indisvalid, (SELECT o.option_value FROM pg_options_to_table(c.reloptions) o"
        " WHERE o.option_name = 'ef_construction') FROM pg_class c"
        " JOIN pg_index i ON i.indexrelid = c.oid WHERE c.relname = %s",
        (name,),
    ).fetchone()
    if found is None or not found[0]:
        return 0
    return int(found[1]) if found[1] is not None else PGVECTOR_EF_CONSTRUCTION


def alone(visible: Sequence[str], what: str) -> str:
    """The one namespace of ``visible``, for a build that serves a tenant seen alone
    (``what`` names it); refused for a handle that also sees shared namespaces."""
    if len(visible) != 1:
        raise InvalidInputError(
            f"{what} for a tenant seen alone; open the store without shared namespaces"
        )
    return visible[0]


# -- built on demand -------------------------------------------------------------------------


def build_word_postings(conn: Conn, namespace: str, drop: bool = False) -> int:
    """Give ``namespace`` word postings (``drop``: remove them) in ``conn``'s transaction,
    which the word channel then scores on (:func:`.word_sql.top_words_ctes`); returns the
    postings written. Handles use them from their next count of the tenant's memories
    (:mod:`.words_due`, which also calls this); triggers keep them in step with every
    write. Follow a build with :func:`vacuum_word_postings` (after the commit).

    Why: without them the word channel reads and scores every row holding a query
    word, tens of thousands for a common word in a tenant of 100k memories. The build
    holds writes to the memories table for its duration (SHARE lock; searches go on),
    so that no row is written between the listing of the tenant and its postings. Where
    the database has a trusted pg_textsearch (:data:`.ranked.MIN_VERSION`), a BM25 index
    of the tenant's words ranks the postings too (:mod:`.ranked`): the word channel then
    scores only the index's winners."""
    lock_word_postings(conn, namespace)
    conn.execute("LOCK TABLE memories IN SHARE MODE")
    conn.execute("DELETE FROM word_postings WHERE namespace = %s", (namespace,))
    ranked.drop(conn, namespace)
    conn.execute("DELETE FROM word_namespaces WHERE namespace = %s", (namespace,))
    if drop:
        return 0
    conn.execute("INSERT INTO word_namespaces (namespace) VALUES (%s)", (namespace,))
    written = conn.execute(
        f"INSERT INTO word_postings {postings_sql('memories')} WHERE r.namespace = %s",
        (namespace,),
    ).rowcount
    ranked.build(conn, namespace)  # the BM25 index of its winners, with a trusted library
    return written


def lock_word_postings(conn: Conn, namespace: str) -> None:
    """Hold, until ``conn``'s transaction ends, the one lock under which ``namespace``'s word
    postings are built or dropped: two builds (a command's, a write's) take turns instead
    of writing the same postings at once."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        ("recalld word postings " + namespace,),
    )


def vacuum_word_postings(dsn: str) -> None:
    """Counting a word's rows then reads the index alone (its visibility map set)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) word_postings")


def build_own_vector_index(dsn: str, namespace: str, drop: bool = False) -> str:
    """Give ``namespace`` a vector index of its own rows (``drop``: remove it); returns its
    name. Handles opened afterwards use it.

    Why: under the tenant filter, the HNSW index of the whole table passes over the
    other tenants' nodes to reach the tenant's; a tenant holding 100k of 1M memories
    found 0.95 of the exact top 10 with 1,000 candidates examined. An index of its own
    rows (a partial index, ``WHERE namespace = '<tenant>'``) is searched like a store of
    its own. Each statement of a handle using it states its namespace as a literal, so
    the planner can prove that the partial index applies in every plan, cached ones
    too. The build does not block writes (``CONCURRENTLY``); an interrupted one leaves
    an invalid index that no search uses and the next build replaces."""
    name = own_index_name(namespace)
    with psycopg.connect(dsn, autocommit=True) as conn:
        valid = index_valid(conn, name)
        if valid is not None and (drop or not valid):
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        if not drop:
            conn.execute(
                "SELECT set_config('maintenance_work_mem', %s, false)", (OWN_INDEX_BUILD_MEMORY,)
            )
            conn.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memories USING hnsw"
                " (embedding vector_cosine_ops)"
                f" WITH (ef_construction = {int(OWN_INDEX_EF_CONSTRUCTION)})"
                f" WHERE namespace = {word_sql.literal(namespace)}"
            )
    return name


def advice(visible: Sequence[str], has: Indexes, memories: int, table_rows: int) -> tuple[str, ...]:
    """What ``recalld status`` advises a tenant seen alone holding ``memories`` of the
    table's ``table_rows``: the indexes of its own it lacks and its size calls for."""
    if len(visible) != 1:
        return ()
    out: tuple[str, ...] = ()
    if not has.own_vectors and OWN_INDEX_ADVISED_ROWS <= memories <= table_rows // 2:
        out += (
            f"this tenant's vector searches walk the index of all {table_rows:,}"
            " memories of the database: `recalld postgres tenant-index` gives it"
            " one of its own (docs/postgres.md)",
        )
    if advises_word_postings(visible, has, memories):
        out += (
            f"this tenant's word searches score every one of its {memories:,}"
            " memories that holds a query word: `recalld postgres word-index`"
            " scores them on an index instead (docs/postgres.md)",
        )
    return out


def advises_word_postings(visible: Sequence[str], has: Indexes, memories: int) -> bool:
    """Whether a tenant seen alone holding ``memories`` is advised word postings."""
    return not has.word_postings and len(visible) == 1 and memories >= WORD_POSTINGS_ADVISED_ROWS


# -- the table's vector index ----------------------------------------------------------------


def create_vector_index(conn: Conn) -> None:
    """The HNSW index, unless a bulk load (of this or another handle) is running: it
    builds the index itself when it ends."""
    free = conn.execute(
        f"SELECT pg_try_advisory_xact_lock_shared(hashtext('{BULK_LOCK}'))"
    ).fetchone()
    if free is not None and free[0]:
        conn.execute(CREATE_VECTOR_INDEX)


def start_bulk(conn: Conn) -> bool:
    """Take the bulk-load lock (a session lock on this connection) if the store holds no
    vector and no index yet and no other load runs."""
    got = conn.execute(f"SELECT pg_try_advisory_lock(hashtext('{BULK_LOCK}'))").fetchone()
    if got is None or not got[0]:
        return False
    empty = conn.execute(
        f"SELECT to_regclass('memories_embedding') IS NULL AND NOT EXISTS ({VECTOR_NAMESPACES})"
    ).fetchone()
    if empty is not None and empty[0]:
        return True
    conn.execute(BULK_UNLOCK)
    return False


def finish_bulk(conn: Conn, dimension: int | None) -> None:
    """Build the index over every row (other tenants' included), with
    ``maintenance_work_mem`` raised to fit the graph, then free the lock."""
    try:
        if dimension is not None:
            found = conn.execute(
                "SELECT greatest((SELECT count(embedding) FROM memories),"
                " (SELECT reltuples::bigint FROM pg_class WHERE oid = 'memories'::regclass)),"
                " (SELECT setting::bigint * 1024 FROM pg_settings"
                "  WHERE name = 'maintenance_work_mem')"
            ).fetchone()
            assert found is not None
            memory = max(index_memory(int(found[0]), dimension), int(found[1]))
            conn.execute(
                "SELECT set_config('maintenance_work_mem', %s, false)", (f"{memory // 1024}kB",)
            )
            try:
                conn.execute(CREATE_VECTOR_INDEX)
            finally:
                conn.execute("RESET maintenance_work_mem")
    finally:
        conn.execute(BULK_UNLOCK)


def index_memory(rows: int, dimension: int) -> int:
    """Bytes of ``maintenance_work_mem`` for building the HNSW graph of ``rows`` vectors in
    memory (pgvector builds much faster when it fits), between 64 MiB and the cap."""
    need = int(rows * (dimension * 4 + INDEX_BYTES_PER_ROW) * 1.25)
    return max(64 << 20, min(need, BULK_INDEX_MEMORY_MAX))
