"""The word channel over a tenant's word postings under a filter narrower than its live
rows (a time window, types, tags, a session, ...): :func:`.word_sql.bm25_ctes`'s rows,
order and scores, the table read for rows in score order until the list is full of rows
that pass, or, when the filter's indexed part admits few rows, those rows read first.

Invariants: every row holding a phrase has its exact score on the postings
(:func:`.word_sql.posting_scores`), and the idfs are the namespace's whatever the filter
(as FTS5 counts them); a row is found in the table only by tests Row-Level Security lets
the planner make index conditions (leakproof: equalities on ``namespace`` and ``pk``, or
the filter's time window or session), so the application's role reads no whole table; the
list is the exact one, ties at its cut ordered by id. Which way the rows were read is named
in the statement (``lex_walk``, ``lex_admitted``; ``EXPLAIN`` shows the other "never
executed")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recalld.stores.postgres.word_sql import (
    Params,
    bm25_rows,
    holds_any,
    literal,
    phrase_hits,
    posting_scores,
)

ADMITTED_FIRST_ROWS = 5_000
"""When the part of the filter an index reads (a time window, a session:
:func:`.queries.narrowing_sql`) admits at most this many of the tenant's rows, those rows
are read first and tested for the phrases (``lex_admitted``) instead of walking the
postings' rows in score order (``lex_walk``), which would read most of them from the
table to find the few that pass. Server CPU of the word statement, the 100k tenant as the
application's role, 20 questions: admitted first about 8 ms + 4.2 us a row admitted (a day
of 140 rows 6-8 ms, a week 8-10, a month of 4,100 23-28, a quarter of 12,500 60), the walk
17-42 ms whatever the window (27-39 for the month, 20 for the quarter); equal near 5,000
(docs/design/scale-history.md, "late night")."""


def filtered_words_ctes(
    query: Sequence[Sequence[str]], where: str, namespace: str, narrowed: str
) -> tuple[list[str], Params]:
    """The word channel of ``namespace``'s postings under the filter ``where``, the one pass
    over its admitted rows chosen in the statement when ``narrowed`` (the filter's indexed
    conditions, ``""`` for none) admits at most :data:`ADMITTED_FIRST_ROWS` rows."""
    ctes, params = posting_scores(query, namespace)
    n, ns = len(query), literal(namespace)
    columns = ", ".join(f"c.f{i}" for i in range(n))
    passing = (
        f"CROSS JOIN LATERAL (SELECT m.id, m.ref_time FROM memories m WHERE m.namespace = {ns}"
        f" AND m.pk = c.pk AND {where} OFFSET 0) r"
    )
    ctes += [
        # The rows in score order (ties by pk), each read from the table by its pk and
        # tested, until the list's length pass: a filter admitting a share s of the rows
        # reads about limit / s of them (OFFSET 0 keeps each read a lookup by pk).
        f"lex_walk AS MATERIALIZED (SELECT r.id, r.ref_time, c.pk, c.dl, c.near, {columns}"
        f" FROM (SELECT * FROM lex_sum ORDER BY near DESC, pk) c {passing}"
        " ORDER BY c.near DESC, c.pk LIMIT %(bm25_limit)s)",
        # The rows scoring the walk's last when it filled the list: ties go by id, which
        # the walk's order (by pk) does not follow.
        f"lex_tie AS MATERIALIZED (SELECT r.id, r.ref_time, c.pk, c.dl, c.near, {columns}"
        f" FROM lex_sum c {passing} WHERE c.near = (SELECT min(near) FROM lex_walk"
        " HAVING count(*) >= %(bm25_limit)s) AND c.pk NOT IN (SELECT pk FROM lex_walk))",
    ]
    found = ["lex_walk", "lex_tie"]
    hit_columns = f"id, ref_time, pk, dl, true AS ok, {', '.join(f'f{i}' for i in range(n))}"
    if narrowed:
        hits, more = phrase_hits(query)
        params.update(more)
        holds = holds_any([phrase[0] for phrase in query], params)
        few = int(ADMITTED_FIRST_ROWS)
        ctes += [
            f"lex_few AS MATERIALIZED (SELECT count(*) <= {few} AS few FROM (SELECT FROM"
            f" memories m WHERE m.namespace = {ns}{narrowed} LIMIT {few} + 1) x)",
            "lex_admitted AS MATERIALIZED (SELECT m.id, m.ref_time, m.pk,"
            " m.lex_length::float8 AS dl, "
            + ", ".join(f"{hit} AS f{i}" for i, hit in enumerate(hits))
            + f" FROM memories m WHERE {where} AND {holds})",
        ]
        # Each branch runs only if chosen (a CTE is computed when first read).
        union = " UNION ALL ".join(
            f"SELECT {hit_columns} FROM {name} WHERE NOT (SELECT few FROM lex_few)"
            for name in found
        )
        union += (
            f" UNION ALL SELECT {hit_columns} FROM lex_admitted WHERE (SELECT few FROM lex_few)"
        )
    else:
        union = " UNION ALL ".join(f"SELECT {hit_columns} FROM {name}" for name in found)
    return [*ctes, f"lex_hit AS ({union})", bm25_rows(n)], params


@dataclass(frozen=True)
class FilteredPostings:
    """A namespace's word postings under a filter narrower than its live rows
    (:func:`filtered_words_ctes`); ``narrowed``: the filter's conditions an index reads."""

    namespace: str
    narrowed: str
    name = "postings-filtered"

    def ctes(self, query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
        return filtered_words_ctes(query, where, self.namespace, self.narrowed)
