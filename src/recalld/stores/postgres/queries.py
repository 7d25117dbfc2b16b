"""SQL builders for the PostgreSQL store (named ``%(name)s`` parameters): building a query
is separate from running it, so a query can be printed and snapshot-tested."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from recalld.lexical import IDF_FLOOR, K1, B, phrases, trigram_terms
from recalld.records import MemoryFilter, TimeRange
from recalld.stores.base import (
    CandidateRequest,
    EntitiesAsk,
    NearestAsk,
    RecentAsk,
    TextAsk,
    WordsAsk,
)
from recalld.stores.rows import COLUMN_NAMES

SELECT_COLUMNS = ", ".join(f"m.{c}" for c in COLUMN_NAMES)
Params = dict[str, Any]
Reader = Callable[[Any, str], tuple[str, Params]]
"""A channel's reader: its ask and the filters' WHERE to the CTEs answering it."""
TIES = {
    "semantic": "score DESC, id",
    "window_semantic": "score DESC, id",
    "bm25": "score DESC, id",
    "trigram": "score DESC, ref_time DESC, id",
    "substring": "ref_time DESC, id DESC",
    "entity": "score DESC, ref_time DESC, id",
    "temporal": "score DESC, id DESC",
}
"""Each channel's order, ties included, as the SQLite store breaks them: equal scores by the
memory's text id, which ``recalld migrate`` keeps (row numbers do not survive a migration),
so that both backends rank alike; ids are time-ordered, so equal times put the newest id
first."""
LIMITS = {name: f"{name}_limit" for name in TIES}
"""Each channel's limit parameter (the word channel's CTEs read ``bm25_limit`` too)."""
TIE_MARGIN = 16
"""Extra nearest neighbours fetched so that equal cosines at the cut are ordered as SQLite
orders them (the index yields them in no defined order)."""


def filter_sql(
    filters: MemoryFilter, namespaces: Sequence[str], literal_namespace: bool = False
) -> tuple[str, Params]:
    """A WHERE clause over ``memories m`` confined to ``namespaces``; never empty.

    ``literal_namespace``: the one namespace written in the statement instead of passed as
    a parameter, for a tenant with a vector index of its own: a plan made without the
    parameters' values (a cached statement's) then still knows which partial index applies
    and how many rows the namespace holds. One namespace is compared by ``=``: an index
    led by it then yields rows in its next column's order, so the temporal channel reads its
    newest rows and stops; under ``= ANY`` a window of 62k rows of 100k was a parallel scan
    and a sort (136 ms of a backend's CPU, two workers besides), now ~200 rows of an index."""
    params: Params = {"namespaces": list(namespaces)}
    if literal_namespace and len(namespaces) == 1:
        clauses = [f"m.namespace = {literal(namespaces[0])}"]
    elif len(namespaces) == 1:
        clauses = ["m.namespace = %(namespace)s"]
        params["namespace"] = namespaces[0]
    else:
        clauses = ["m.namespace = ANY(%(namespaces)s)"]
    if not filters.include_forgotten:
        clauses.append("m.forgotten_at IS NULL")
    if not filters.include_superseded:
        clauses.append("m.superseded_by IS NULL")
    for column in ("project", "scope", "session_id", "superseded_by"):
        value = getattr(filters, column)
        if value is not None:
            clauses.append(f"m.{column} = %(f_{column})s")
            params[f"f_{column}"] = value
    if filters.types:
        clauses.append("m.type = ANY(%(f_types)s)")
        params["f_types"] = list(filters.types)
    if filters.tags:
        clauses.append("m.tags @> %(f_tags)s::text[]")
        params["f_tags"] = list(filters.tags)
    time_sql, time_params = window_sql(filters.time_range, "f")
    return " AND ".join(clauses) + time_sql, {**params, **time_params}


def window_sql(window: TimeRange | None, prefix: str) -> tuple[str, Params]:
    """`` AND`` conditions on the reference time (empty without a window)."""
    if window is None:
        return "", {}
    sql, params = "", Params()
    if window.start is not None:
        sql += f" AND m.ref_time >= %({prefix}_start)s"
        params[f"{prefix}_start"] = window.start.timestamp()
    if window.end is not None:
        sql += f" AND m.ref_time < %({prefix}_end)s"
        params[f"{prefix}_end"] = window.end.timestamp()
    return sql, params


def literal(text: str) -> str:
    """``text`` as an SQL string literal (namespaces are validated names; quoted anyway)."""
    return "'" + text.replace("'", "''") + "'"


def _f(value: float) -> str:
    return f"{value!r}::float8"


def _phrase_hits(query: Sequence[Sequence[str]]) -> tuple[list[str], Params]:
    """Each phrase's hits in a row ``m`` (its ``lex_tokens``), as FTS5 counts them."""
    params: Params = {}
    hits = []
    for i, phrase in enumerate(query):
        params[f"lex_h{i}"] = phrase[0]
        if len(phrase) == 1:
            hits.append(f"cardinality(array_positions(m.lex_tokens, %(lex_h{i})s::text))::float8")
        else:
            params[f"lex_p{i}"] = list(phrase)
            hits.append(
                f"(SELECT count(*) FROM unnest(array_positions(m.lex_tokens, %(lex_h{i})s::text))"
                f" AS a(at) WHERE m.lex_tokens[a.at:a.at + {len(phrase) - 1}] ="
                f" %(lex_p{i})s::text[])::float8"
            )
    return hits, params


def _term(k: int, hits: str, length: str) -> str:
    """Phrase ``k``'s part of a row's BM25: its idf ``i.idf{k}`` times the weight of its
    ``hits`` in a row of ``length`` (float8 expressions)."""
    return (
        f"i.idf{k} * (({hits} * ({_f(K1)} + 1.0::float8)) / ({hits} + {_f(K1)} *"
        f" (1.0::float8 - {_f(B)} + {_f(B)} * {length} / i.avgdl)))"
    )


def _score(n: int) -> str:
    """A row's BM25 from its hits ``h.f{k}`` and length ``h.dl`` and the idfs ``i``."""
    return "0::float8" + "".join(f" + {_term(k, f'h.f{k}', 'h.dl')}" for k in range(n))


def _any_hit(n: int) -> str:
    return " OR ".join(f"h.f{i} > 0" for i in range(n))


def _idf(n: int, counted: str) -> list[str]:
    """CTEs ``lex_df`` (each phrase's rows ``n{i}``: the select list ``counted``) and
    ``lex_idf`` (each phrase's idf, and the mean row length, from ``lexical_stats``)."""
    idfs = ", ".join(
        f"CASE WHEN ln((s.n - d.n{i} + 0.5::float8) / (d.n{i} + 0.5::float8)) <= 0"
        f" THEN {_f(IDF_FLOOR)} ELSE ln((s.n - d.n{i} + 0.5::float8) / (d.n{i} + 0.5::float8))"
        f" END AS idf{i}"
        for i in range(n)
    )
    return [
        # MATERIALIZED: each count made once, however many times the idf names it.
        f"lex_df AS MATERIALIZED (SELECT {counted})",
        "lex_idf AS (SELECT s.total / s.n AS avgdl, " + idfs + " FROM (SELECT"
        " sum(rows)::float8 AS n, sum(tokens)::float8 AS total FROM lexical_stats"
        " WHERE namespace = ANY(%(namespaces)s)) s, lex_df d)",
    ]


def _bm25(n: int) -> str:
    """CTE ``bm25``: the rows of ``lex_hit`` its filter admits, ranked. Terms are summed
    in phrase order, in float8, as C does."""
    return (
        f"bm25 AS (SELECT h.id, {_score(n)} AS score, h.ref_time, h.pk FROM lex_hit h,"
        f" lex_idf i WHERE h.ok AND ({_any_hit(n)}) ORDER BY score DESC, h.id"
        " LIMIT %(bm25_limit)s)"
    )


def bm25_ctes(query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
    """FTS5's ``bm25()`` of the ``query`` phrases (see :mod:`recalld.lexical`), higher is
    better, over every row that holds a phrase: CTEs ``lex_hit`` (every row of the
    namespaces in ``%(namespaces)s`` holding a phrase's first token, forgotten ones included
    as FTS5 counts them, with each phrase's hits ``f{i}``; read through the namespace-led
    GIN index by ``recalld_lex_rows``, migration 6, one read per phrase), then :func:`_idf`'s
    and :func:`_bm25`'s."""
    hits, params = _phrase_hits(query)
    # Each phrase's hits are counted only in the rows holding its first token (one index
    # read per phrase), not in every row holding any: at 100k rows a seven-word question
    # counted 140k times in 20k rows, now 22k times; rows are then gathered per memory.
    parts = " UNION ALL ".join(
        f"SELECT m.pk, m.id, m.ref_time, m.lex_length, ({where}) AS ok, {i} AS i, {hit} AS f"
        f" FROM recalld_lex_rows(%(lex_h{i})s::text, %(namespaces)s::text[]) m"
        for i, hit in enumerate(hits)
    )
    pivot = ", ".join(
        f"coalesce(sum(f) FILTER (WHERE i = {i}), 0::float8) AS f{i}" for i in range(len(query))
    )
    counted = ", ".join(
        f"count(*) FILTER (WHERE h.f{i} > 0)::float8 AS n{i}" for i in range(len(query))
    )
    any_hit = _any_hit(len(query))
    lex_hit = (
        f"lex_hit AS (SELECT id, ref_time, pk, lex_length::float8 AS dl, ok, {pivot}"
        f" FROM ({parts}) one GROUP BY pk, id, ref_time, lex_length, ok)"
    )
    n = len(query)
    return [lex_hit, *_idf(n, f"{counted} FROM lex_hit h WHERE {any_hit}"), _bm25(n)], params


def scan_ctes(query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
    """:func:`bm25_ctes`'s rows, order and scores from one pass over the namespaces' rows
    (read by a namespace index, each tested for the phrases' first tokens), instead of one
    read of the table's GIN index per phrase: for a tenant of few memories, a common word's
    index entries span every tenant's rows, and reading them cost more than testing the
    tenant's own rows (:func:`indexes.scans_rows`)."""
    hits, params = _phrase_hits(query)
    n = len(query)
    columns = ", ".join(f"{hit} AS f{i}" for i, hit in enumerate(hits))
    params["lex_firsts"] = [phrase[0] for phrase in query]
    lex_hit = (
        "lex_hit AS MATERIALIZED (SELECT m.id, m.ref_time, m.pk, m.lex_length::float8 AS dl,"
        f" ({where}) AS ok, {columns} FROM memories m WHERE m.namespace = ANY(%(namespaces)s)"
        " AND m.lex_tokens && %(lex_firsts)s::text[])"
    )
    counted = ", ".join(f"count(*) FILTER (WHERE h.f{i} > 0)::float8 AS n{i}" for i in range(n))
    return [lex_hit, *_idf(n, f"{counted} FROM lex_hit h WHERE {_any_hit(n)}"), _bm25(n)], params


WORD_READ_FACTOR = 1
"""The word channel over postings (:func:`top_words_ctes`) reads from the table the best
this many times the list's length of the rows it scored on the postings, plus
:data:`WORD_READ_EXTRA`, and the others only when one of them might still enter the list
(when some of the best did not pass the filter, or scores tie across the cut)."""
WORD_READ_EXTRA = 16
"""Rows read from the table past :data:`WORD_READ_FACTOR` times the list's length: room for
that many of the best to fail the filter (forgotten, replaced) or to tie the list's last
score before the others are read too. Since each row's score on the postings is its exact
one, the list's length plus 16 proves the list as often as twice its length did (100k
store, 60 questions, lists of 200: the same 60 lists; 64 / 70 ms p50 / mean against 69 / 78
at load 9, docs/design/scale-history.md)."""


def top_words_ctes(
    query: Sequence[Sequence[str]], where: str, namespace: str
) -> tuple[list[str], Params]:
    """The word channel over a namespace's postings: :func:`bm25_ctes`'s rows, order and
    scores, without reading the table for every row holding a query word.

    The postings are PostgreSQL migration 9's (``recalld postgres word-index``): per word,
    its rows with its count in each (``tf``) and the row's length (``dl``), in an index
    read alone. A phrase of one token takes its hits in a row from them; a phrase of
    several tokens finds the rows holding all of its tokens in them too and counts its hits
    in those rows. Every row holding a phrase then
    gets its exact score (``lex_sum``: each phrase's hits and the row's length, the values
    :func:`bm25_ctes` counts on the row, through the same expression), and only the best
    :data:`WORD_READ_FACTOR` times the list's length are read from the table (their ids,
    times and the search's filter; not their tokens); the others too only if one of them
    might still enter the list, which the filter dropping rows, or equal scores across the
    cut (ordered by id, not by row number), can make happen."""
    hits, params = _phrase_hits(query)
    n = len(query)
    ns = literal(namespace)
    single = [i for i, phrase in enumerate(query) if len(phrase) == 1]
    multi = [i for i in range(n) if i not in single]
    read = f"(%(bm25_limit)s * {int(WORD_READ_FACTOR)} + {int(WORD_READ_EXTRA)})"
    posted = " AND p.token = %(lex_h{i})s::text"
    counts = (
        ", ".join(
            f"(SELECT count(*) FROM word_postings p WHERE p.namespace = {ns}"
            + posted.format(i=i)
            + f")::float8 AS n{i}"
            for i in single
        )
        or "0 AS none"
    )
    # Refuses (migration 9's WORDS_GONE) if the postings were dropped since the handle
    # opened; the store then asks again without them.
    counts += f", recalld_words_listed({ns}) AS listed"
    # Each phrase's hits in each row holding it: (row, its length, phrase, hits).
    parts = [
        f"SELECT p.pk, p.dl, {i} AS i, p.tf::float8 AS f FROM word_postings p"
        f" WHERE p.namespace = {ns}" + posted.format(i=i)
        for i in single
    ]
    ctes = [f"lex_n AS MATERIALIZED (SELECT {counts})"]
    if multi:
        # The rows holding each of a phrase's tokens, from the postings (one row per row
        # and distinct token): a B-tree read by leakproof equalities, which Row-Level
        # Security lets the planner use. The GIN index's containment test is not
        # leakproof, so under the wall (the application's role) it was a scan of the
        # whole table (1.4-2.5 s a phrase in the 1M database).
        phrase_rows = " UNION ".join(
            f"SELECT p.pk FROM word_postings p WHERE p.namespace = {ns}"
            f" AND p.token = ANY(%(lex_p{i})s::text[]) GROUP BY p.pk"
            f" HAVING count(*) = {len(set(query[i]))}"
            for i in multi
        )
        ctes.append(
            "lex_multi AS MATERIALIZED (SELECT m.pk, m.lex_length AS dl, "
            + ", ".join(f"{hits[i]} AS f{i}" for i in multi)
            + f" FROM memories m WHERE m.namespace = {ns} AND m.pk IN ({phrase_rows}))"
        )
        parts += [
            f"SELECT x.pk, x.dl, {i} AS i, x.f{i} AS f FROM lex_multi x WHERE x.f{i} > 0"
            for i in multi
        ]
    counted = (
        ", ".join(
            (
                f"n.n{i}"
                if i in single
                else f"(SELECT count(*) FROM lex_multi x WHERE x.f{i} > 0)::float8"
            )
            + f" AS n{i}"
            for i in range(n)
        )
        + " FROM lex_n n"
    )
    pivot = ", ".join(
        f"coalesce(sum(f) FILTER (WHERE i = {i}), 0::float8) AS f{i}" for i in range(n)
    )
    columns = ", ".join(f"c.f{i}" for i in range(n))
    row = (
        f"SELECT m.id, m.ref_time, m.pk, c.dl, ({where}) AS ok, c.near, {columns}"
        f" FROM {{}} c JOIN memories m ON m.namespace = {ns} AND m.pk = c.pk"
    )
    ctes += [
        *_idf(n, counted),
        # Each row's hits and length as bm25_ctes counts them on the row, so its score
        # (the same expression, in the same order) is the exact one.
        f"lex_sum AS MATERIALIZED (SELECT h.*, {_score(n)} AS near FROM (SELECT pk,"
        f" max(dl)::float8 AS dl, {pivot} FROM ({' UNION ALL '.join(parts)}) l GROUP BY pk) h,"
        " lex_idf i)",
        # The best rows (one top-N sort), read from the table for their ids, times and
        # the filter ...
        "lex_top AS MATERIALIZED (SELECT c.*, row_number() OVER (ORDER BY near DESC, pk)"
        f" AS r FROM (SELECT * FROM lex_sum ORDER BY near DESC, pk LIMIT {read} + 1) c)",
        "lex_hit_b AS MATERIALIZED ("
        + row.format(f"(SELECT * FROM lex_top WHERE r <= {read})")
        + ")",
        # ... the others only if the best of them might enter the list: the filter dropped
        # enough of those read, or its score ties the list's last (ties go by id).
        f"lex_proof AS MATERIALIZED (SELECT (SELECT near FROM lex_top WHERE r > {read}) AS"
        " left_out, (SELECT near FROM lex_hit_b WHERE ok ORDER BY near DESC"
        " OFFSET %(bm25_limit)s - 1 LIMIT 1) AS last)",
        "lex_hit_c AS MATERIALIZED ("
        + row.format(
            "(SELECT * FROM lex_sum WHERE NOT coalesce((SELECT left_out IS NULL OR last >"
            " left_out FROM lex_proof), false) AND pk NOT IN (SELECT pk FROM lex_hit_b))"
        )
        + ")",
        "lex_hit AS (SELECT * FROM lex_hit_b UNION ALL SELECT * FROM lex_hit_c)",
    ]
    return [*ctes, _bm25(n)], params


def like_any(pieces: Sequence[str]) -> list[str]:
    return [
        "%" + p.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for p in pieces
    ]


_SEMANTIC = "1 - (m.embedding <=> %(qv)s)"


def _semantic(ask: NearestAsk, where: str) -> tuple[str, Params]:
    sql = (
        f"semantic AS (SELECT m.id, {_SEMANTIC} AS score, m.ref_time, m.pk FROM memories m"
        f" WHERE {where} AND m.embedding IS NOT NULL ORDER BY m.embedding <=> %(qv)s"
        " LIMIT %(semantic_fetch)s)"
    )
    return sql, {"semantic_limit": ask.limit, "semantic_fetch": ask.limit + TIE_MARGIN}


def _window_semantic(ask: NearestAsk, where: str) -> tuple[str, Params]:
    window, params = window_sql(ask.window, "w")
    sql = (
        f"window_semantic AS (SELECT m.id, {_SEMANTIC} AS score, m.ref_time, m.pk"
        f" FROM memories m WHERE {where}{window} AND m.embedding IS NOT NULL"
        " ORDER BY m.embedding <=> %(qv)s LIMIT %(window_semantic_fetch)s)"
    )
    return sql, {
        **params,
        "window_semantic_limit": ask.limit,
        "window_semantic_fetch": ask.limit + TIE_MARGIN,
    }


class WordEngine(Protocol):
    """An engine behind the word channel (as the SQLite store's ``readers.WordEngine``):
    FTS5's BM25 of a question's phrases, best first. Here an engine builds SQL, the CTEs
    ending in one named ``bm25`` (``id, score, ref_time, pk`` of its best ``%(bm25_limit)s``
    rows passing ``where``, ties by id), which :func:`candidates_sql` sends with the other
    channels' in one statement; every engine's rows and scores are the same."""

    name: str

    def ctes(self, query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
        """The CTEs of the channel for the phrases ``query`` (never empty)."""


@dataclass(frozen=True)
class EveryRow:
    """Every row holding a phrase, read and scored (:func:`bm25_ctes`); answers any
    request."""

    name = "every-row"

    def ctes(self, query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
        return bm25_ctes(query, where)


@dataclass(frozen=True)
class Postings:
    """A namespace's word postings (migration 9, ``recalld postgres word-index``): scored
    on the index, the best read from the table (:func:`top_words_ctes`); for a handle of
    that namespace alone, under filters no narrower than its live memories."""

    namespace: str
    name = "postings"

    def ctes(self, query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
        return top_words_ctes(query, where, self.namespace)


@dataclass(frozen=True)
class TenantRows:
    """The rows of the namespaces seen, each tested for the phrases (:func:`scan_ctes`); for
    a handle that sees few memories (:func:`indexes.scans_rows`)."""

    name = "tenant-rows"

    def ctes(self, query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
        return scan_ctes(query, where)


EVERY_ROW = EveryRow()
TENANT_ROWS = TenantRows()


def words_reader(engine: WordEngine) -> Reader:
    """The word channel's reader, answered by ``engine``."""

    def read(ask: WordsAsk, where: str) -> tuple[str, Params]:
        query = phrases(ask.terms)
        if not query:  # no term has a token: FTS5 matches nothing
            none = (
                "bm25 AS (SELECT NULL::text AS id, 0::float8 AS score, NULL::float8 AS"
                " ref_time, NULL::bigint AS pk WHERE false)"
            )
            return none, {"bm25_limit": ask.limit}
        ctes, params = engine.ctes(query, where)
        return ", ".join(ctes), {**params, "bm25_limit": ask.limit}

    return read


def _trigram(ask: TextAsk, where: str) -> tuple[str, Params]:
    grams = list(trigram_terms(ask.text)[0])
    sql = (
        "trigram AS (SELECT m.id, (SELECT count(*) FROM unnest(%(grams)s::text[]) g"
        " WHERE strpos(m.content, g) > 0)::float8 AS score, m.ref_time, m.pk FROM memories m"
        f" WHERE m.content ILIKE ANY(%(gram_likes)s) AND {where}"
        " ORDER BY score DESC, m.ref_time DESC, m.id LIMIT %(trigram_limit)s)"
    )
    return sql, {"grams": grams, "gram_likes": like_any(grams), "trigram_limit": ask.limit}


def _substring(ask: TextAsk, where: str) -> tuple[str, Params]:
    short = trigram_terms(ask.text)[1]
    sql = (
        "substring AS (SELECT m.id, 0::float8 AS score, m.ref_time, m.pk FROM memories m"
        f" WHERE m.content ILIKE ANY(%(short_likes)s) AND {where}"
        " ORDER BY m.ref_time DESC, m.id DESC LIMIT %(substring_limit)s)"
    )
    return sql, {"short_likes": like_any(short), "substring_limit": ask.limit}


def _entity(ask: EntitiesAsk, where: str) -> tuple[str, Params]:
    sql = (
        "entity AS (SELECT m.id, cardinality(ARRAY(SELECT unnest(m.entities) INTERSECT"
        " SELECT unnest(%(entities)s::text[])))::float8 AS score, m.ref_time, m.pk"
        f" FROM memories m WHERE m.entities && %(entities)s::text[] AND {where}"
        " ORDER BY score DESC, m.ref_time DESC, m.id LIMIT %(entity_limit)s)"
    )
    return sql, {"entities": list(ask.entities), "entity_limit": ask.limit}


def _temporal(ask: RecentAsk, where: str) -> tuple[str, Params]:
    window, params = window_sql(ask.window, "w")
    sql = (
        "temporal AS (SELECT m.id, m.ref_time AS score, m.ref_time, m.pk FROM memories m"
        f" WHERE {where}{window} ORDER BY m.ref_time DESC, m.id DESC"
        " LIMIT %(temporal_limit)s)"
    )
    return sql, {**params, "temporal_limit": ask.limit}


READERS: dict[str, Reader] = {
    "semantic": _semantic,
    "window_semantic": _window_semantic,
    "bm25": words_reader(EVERY_ROW),
    "trigram": _trigram,
    "substring": _substring,
    "entity": _entity,
    "temporal": _temporal,
}
"""One reader per channel (:mod:`recalld.retrieval.channels`), of the channel's ask and the
filters' WHERE: the CTE (or CTEs) answering it, named after the channel, with its
parameters (each its ``<channel>_limit``); :func:`candidates_sql` composes them."""


def readers(words: WordEngine) -> Mapping[str, Reader]:
    """:data:`READERS` with the word channel answered by ``words``."""
    return {**READERS, "bm25": words_reader(words)}


def candidates_sql(
    request: CandidateRequest,
    where: str,
    channels: Sequence[str],
    answered_by: Mapping[str, Reader] = READERS,
) -> tuple[str, Params]:
    """The asks of ``request`` for ``channels`` (those the store answers) in ONE
    statement, a CTE per channel, rows of (channel, n, id, score) in each channel's order;
    ``answered_by``: the readers (:func:`readers` for another word engine)."""
    ctes: list[str] = []
    params: Params = {}
    for name in channels:
        sql, values = answered_by[name](request.asks[name], where)
        ctes.append(sql)
        params.update(values)
    if not ctes:
        return "", params
    union = " UNION ALL ".join(
        f"SELECT * FROM (SELECT '{name}' AS channel, row_number() OVER (ORDER BY {TIES[name]})"
        f" AS n, id, score FROM {name}) {name}_n WHERE n <= %({LIMITS[name]})s"
        for name in channels
    )
    return f"WITH {', '.join(ctes)} {union} ORDER BY channel, n", params


_PARAM = re.compile(r"%\((\w+)\)s")


def search_rows_sql(
    blocks: Sequence[tuple[str, Params]],
    *,
    vectors: bool,
    radius: int,
    depth: int,
    rows_depth: int,
) -> tuple[str, Params]:
    """ONE statement for :meth:`Store.search_rows`: each request's :func:`candidates_sql`
    (``blocks``, parameters renamed apart) as ``hit`` rows, the session neighbours of the
    first request's candidates ranked within ``depth`` as ``near`` rows (``channel`` = whose
    neighbour, ``n`` = offset), and as ``row`` rows the memory row of every neighbour and of
    every candidate ranked within ``rows_depth`` in some channel (with its vector when
    asked). Needs ``%(namespaces)s``.

    Columns: kind, req, channel, n, id, score, then :data:`SELECT_COLUMNS` and the vector.
    """
    parts, params = [], Params()
    for i, (sql, values) in enumerate(blocks):
        parts.append(
            f"SELECT {i} AS req, h.* FROM ("
            + _PARAM.sub(lambda m, i=i: f"%(r{i}_{m.group(1)})s", sql)  # type: ignore[misc]
            + ") h"
        )
        params.update({f"r{i}_{k}": v for k, v in values.items()})
    hits = " UNION ALL ".join(parts) or (
        "SELECT 0 AS req, ''::text AS channel, 0::bigint AS n, ''::text AS id,"
        " 0::float8 AS score WHERE false"
    )
    nulls = ", ".join(["NULL"] * len(COLUMN_NAMES))
    # Vectors of the candidates only: a neighbour's is never used, and each is 1.5 KB read
    # out of TOAST and sent.
    embedding = (
        "CASE WHEN m.id IN (SELECT id FROM hits) THEN m.embedding END"
        if vectors
        else "NULL::vector"
    )
    params.update(radius=radius, depth=depth, rows_depth=rows_depth)
    # ``centers``: the candidates whose neighbours are wanted, set apart before the join, so
    # that the planner cannot pair every member of their sessions with every other first
    # (400 x 400 rows, 28 ms, for a tenant whose namespace is written as a literal).
    sql = f"""
WITH hits AS ({hits}),
near AS (SELECT DISTINCT id FROM hits WHERE req = 0 AND n <= %(depth)s AND %(radius)s > 0),
members AS (
    SELECT m.id, m.namespace, m.session_id, row_number() OVER (
        PARTITION BY m.namespace, m.session_id ORDER BY m.position, m.pk) AS rn
    FROM memories m
    WHERE (m.namespace, m.session_id) IN (SELECT s.namespace, s.session_id FROM memories s
        WHERE s.id IN (SELECT id FROM near) AND s.namespace = ANY(%(namespaces)s))
    AND m.forgotten_at IS NULL),
centers AS MATERIALIZED (SELECT * FROM members WHERE id IN (SELECT id FROM near)),
pairs AS (
    SELECT c.id AS of_id, o.id AS other, o.rn - c.rn AS off FROM centers c
    JOIN members o ON o.namespace = c.namespace AND o.session_id = c.session_id
        AND o.rn <> c.rn AND abs(o.rn - c.rn) <= %(radius)s),
wanted AS (SELECT id FROM hits WHERE n <= %(rows_depth)s UNION SELECT other FROM pairs)
SELECT 'row' AS kind, NULL::int AS req, NULL::text AS channel, (m.namespace = %(tenant)s)::int
    AS n, m.id, NULL::float8 AS score, {SELECT_COLUMNS}, {embedding}
    FROM memories m WHERE m.id IN (SELECT id FROM wanted) AND m.namespace = ANY(%(namespaces)s)
UNION ALL
SELECT 'hit', req, channel, n, id, score, {nulls}, NULL FROM hits
UNION ALL
SELECT 'near', NULL, of_id, off, other, NULL, {nulls}, NULL FROM pairs
ORDER BY kind, req, channel, n"""
    return sql, params
