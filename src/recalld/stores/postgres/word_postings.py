"""A tenant's word postings (``recalld postgres word-index``): what a posting holds, the
triggers that keep them current, and migration 10, which orders each word's postings by
impact so that the word channel can stop once its top k is proven
(:func:`recalld.stores.postgres.queries.top_words_ctes`).

Invariants:

- A listed namespace (``word_namespaces``) has one posting per (memory, distinct token),
  forgotten memories included (FTS5 keeps them too), written in the writing transaction.
- A posting's ``impact`` is its token's BM25 weight in the row, idf aside, computed with the
  namespace's ``avgdl`` as it was when the postings were built (any positive length does):
  ``tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl))``. The weight with today's mean length
  ``A`` is at most ``impact x max(1, A / avgdl)``: a larger ``A`` divides the length term
  by at most ``A / avgdl``, a smaller one only lowers the weight. This bound is what lets a
  search read a word's best postings first and leave the rest unread.
"""

from __future__ import annotations

from typing import Any

from recalld.lexical import K1, B

MEAN_LENGTH_FLOOR = 1.0
"""The least ``avgdl`` an impact is computed with (a namespace of empty rows has 0)."""


def _weight(tf: str, dl: str, avgdl: str) -> str:
    """The BM25 weight of ``tf`` hits in a row of ``dl`` tokens (float8 expressions)."""
    return (f"(({tf})::float8 * {K1!r}::float8 + ({tf})::float8) / (({tf})::float8"
            f" + {K1!r}::float8 * (1.0::float8 - {B!r}::float8 + {B!r}::float8"
            f" * ({dl})::float8 / ({avgdl})))")  # fmt: skip


def postings_sql(rows: str) -> str:
    """``SELECT`` the postings of ``rows`` (memories' rows) of the listed namespaces."""
    return (
        "(namespace, token, pk, tf, dl, impact) SELECT r.namespace, t.token, r.pk, t.tf,"
        f" r.lex_length, {_weight('t.tf', 'r.lex_length', 'w.avgdl')}"
        f" FROM {rows} r JOIN word_namespaces w ON w.namespace = r.namespace CROSS JOIN LATERAL"
        " (SELECT token, count(*)::integer AS tf FROM unnest(r.lex_tokens) AS token"
        " GROUP BY token) t"
    )


def postings_v9_sql(rows: str) -> str:
    """Migration 9's :func:`postings_sql` (before impacts), which its triggers ran."""
    return (
        "(namespace, token, pk, tf, dl) SELECT r.namespace, t.token, r.pk, t.tf, r.lex_length"
        f" FROM {rows} r JOIN word_namespaces w ON w.namespace = r.namespace CROSS JOIN LATERAL"
        " (SELECT token, count(*)::integer AS tf FROM unnest(r.lex_tokens) AS token"
        " GROUP BY token) t"
    )


MEAN_LENGTH_SQL = (
    f"SELECT greatest(coalesce(sum(tokens)::float8 / nullif(sum(rows), 0), 0), "
    f"{MEAN_LENGTH_FLOOR!r}::float8) FROM lexical_stats WHERE namespace = %s"
)
"""A namespace's mean row length now (its ``avgdl``), from the word statistics."""


def postings_triggers(cur: Any, postings: Any) -> None:
    """The statement-level triggers that keep the postings of listed namespaces in step with
    ``memories`` (``postings(rows)``: the ``(columns) SELECT`` of a set of rows' postings)."""
    remove = ("DELETE FROM word_postings p USING gone WHERE p.namespace = gone.namespace"
              " AND p.pk = gone.pk")  # fmt: skip
    bodies = {
        "insert": f"INSERT INTO word_postings {postings('new_rows')};",
        "delete": f"WITH gone AS (SELECT namespace, pk FROM old_rows) {remove};",
        # Only rows whose tokens changed (an access count's update changes none); the
        # DELETE in WITH runs whether or not the INSERT reads it.
        "update": (
            "WITH changed AS (SELECT n.* FROM new_rows n JOIN old_rows o ON o.pk = n.pk"
            " WHERE o.lex_tokens IS DISTINCT FROM n.lex_tokens"
            " OR o.namespace IS DISTINCT FROM n.namespace),"
            " gone AS (SELECT o.namespace, o.pk FROM old_rows o JOIN changed c ON c.pk = o.pk),"
            f" dropped AS ({remove})"
            f" INSERT INTO word_postings {postings('changed')};"
        ),
    }
    tables = {"insert": "NEW TABLE AS new_rows", "delete": "OLD TABLE AS old_rows",
              "update": "OLD TABLE AS old_rows NEW TABLE AS new_rows"}  # fmt: skip
    for event, body in bodies.items():
        cur.execute(
            f"""
            CREATE OR REPLACE FUNCTION recalld_word_postings_{event}() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
            BEGIN
                -- No namespace keeps postings: nothing to do (the common case).
                IF NOT EXISTS (SELECT 1 FROM word_namespaces) THEN
                    RETURN NULL;
                END IF;
                {body}
                RETURN NULL;
            END $$
            """
        )
        name = f"memories_words_{event}"
        cur.execute(f"DROP TRIGGER IF EXISTS {name} ON memories")
        cur.execute(
            f"CREATE TRIGGER {name} AFTER {event.upper()} ON memories REFERENCING"
            f" {tables[event]} FOR EACH STATEMENT EXECUTE FUNCTION recalld_word_postings_{event}()"
        )


def m010_word_impacts(cur: Any) -> None:
    """Each posting's ``impact`` (module docstring), with the mean row length of its
    namespace (``word_namespaces.avgdl``), and an index of a word's postings in order of
    impact, holding what a search reads of them. Postings already built get theirs here:
    the tables' tenant wall is lifted for this transaction alone (the migrating role owns
    them), so that every namespace's are reached."""
    cur.execute("ALTER TABLE word_namespaces ADD COLUMN IF NOT EXISTS avgdl float8")
    cur.execute("ALTER TABLE word_postings ADD COLUMN IF NOT EXISTS impact float8")
    for table in ("word_namespaces", "word_postings"):
        cur.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    cur.execute(
        "UPDATE word_namespaces w SET avgdl = ("
        + MEAN_LENGTH_SQL.replace("%s", "w.namespace")
        + ") WHERE avgdl IS NULL"
    )
    cur.execute(
        f"UPDATE word_postings p SET impact = {_weight('p.tf', 'p.dl', 'w.avgdl')}"
        " FROM word_namespaces w WHERE w.namespace = p.namespace AND p.impact IS NULL"
    )
    for table in ("word_namespaces", "word_postings"):
        cur.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    cur.execute("CREATE INDEX IF NOT EXISTS word_postings_impact ON word_postings"
                " (namespace, token, impact DESC) INCLUDE (pk, tf, dl)")  # fmt: skip
    postings_triggers(cur, postings_sql)
