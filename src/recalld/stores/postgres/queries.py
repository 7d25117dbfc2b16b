"""SQL builders for the PostgreSQL store (named ``%(name)s`` parameters): building a query
is separate from running it, so a query can be printed and snapshot-tested."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from recalld.lexical import phrases, trigram_terms
from recalld.records import MemoryFilter, TimeRange
from recalld.stores.base import (
    CandidateRequest,
    EntitiesAsk,
    NearestAsk,
    RecentAsk,
    TextAsk,
    WordsAsk,
)
from recalld.stores.postgres.fingerprint import STORED_SQL
from recalld.stores.postgres.word_sql import (
    EVERY_ROW,
    Params,
    WordEngine,
    literal,
)
from recalld.stores.rows import COLUMN_NAMES

SELECT_COLUMNS = ", ".join(f"m.{c}" for c in COLUMN_NAMES)
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


def narrowing_sql(filters: MemoryFilter) -> str:
    """The conditions of ``filters`` an index led by the namespace reads (its time window,
    its session), as ``filter_sql`` writes them (its parameters), each with a leading
    `` AND``; empty when it has neither."""
    sql = window_sql(filters.time_range, "f")[0]
    if filters.session_id is not None:
        sql += " AND m.session_id = %(f_session_id)s"
    return sql


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


NEIGHBOUR_CTES = """
near AS (SELECT DISTINCT id FROM hits WHERE req = 0 AND n <= %(depth)s AND %(radius)s > 0),
members AS (
    SELECT m.id, m.id = ANY(g.centers) AS center, row_number() OVER session AS rn,
        array_agg(m.id) OVER (session ROWS BETWEEN %(radius)s PRECEDING AND %(radius)s FOLLOWING)
        AS around
    FROM (SELECT s.namespace, s.session_id, array_agg(s.id) AS centers FROM memories s
        WHERE s.id IN (SELECT id FROM near) AND s.namespace = ANY(%(namespaces)s)
        GROUP BY s.namespace, s.session_id) g
    JOIN memories m ON m.namespace = g.namespace AND m.session_id = g.session_id
    WHERE m.forgotten_at IS NULL
    WINDOW session AS (PARTITION BY m.namespace, m.session_id ORDER BY m.position, m.pk)),
pairs AS (
    SELECT c.id AS of_id, o.other, greatest(c.rn - %(radius)s, 1) + o.at - 1 - c.rn AS off
    FROM members c CROSS JOIN LATERAL unnest(c.around) WITH ORDINALITY AS o(other, at)
    WHERE c.center AND greatest(c.rn - %(radius)s, 1) + o.at - 1 <> c.rn)""".strip()
"""The session neighbours' CTEs of :func:`search_rows_sql`, read from its ``hits``:
``near`` (the first request's candidates ranked within ``%(depth)s``), ``members`` (the
live members of their sessions, each with its place ``rn`` in its session, whether it is
itself near, and the ids ``around`` it, ``%(radius)s`` places either side, in order) and
``pairs`` (each near member's neighbours ``other`` at offset ``off``; the first id around
a member is at place ``rn - radius``, or 1 at the session's start).

Each member's neighbours come from a window over its session, in the order that numbers
it, so that no member is compared with another. The join of near members to members that
this replaced was planned as nested loops (the planner estimates these CTEs at one row
each) and compared every near member with every member of the searched sessions: 7,790
and 7,960 rows removed by its filters for the tenant of 100k, whose 20 near candidates lie
in 20 sessions of 20 members. A member is near when its id is among its own session's near
ids (``centers``, a few at most), which is the same as its id being near: an id is unique
in its namespace."""


_PARAM = re.compile(r"%\((\w+)\)s")


def search_rows_sql(
    blocks: Sequence[tuple[str, Params]],
    *,
    vectors: bool,
    radius: int,
    depth: int,
    rows_depth: int,
    complete: bool = False,
) -> tuple[str, Params]:
    """ONE statement for :meth:`Store.search_rows`: each request's :func:`candidates_sql`
    (``blocks``, parameters renamed apart) as ``hit`` rows, the session neighbours of the
    first request's candidates ranked within ``depth`` as ``near`` rows (``channel`` = whose
    neighbour, ``n`` = offset), and as ``row`` rows the memory row of every neighbour and of
    every candidate ranked within ``rows_depth`` in some channel (with its vector when
    asked); with vectors and ``complete`` (the first request asks the vector channel, or
    another call answers it and is completed from these candidates: ``candidate_vectors``
    of :meth:`~recalld.stores.base.Store.search_rows`),
    as ``vec`` rows the vectors of its other channels' candidates the vector channel missed
    (:func:`recalld.retrieval.candidates.complete_vectors`; the tenant's own row last, as
    in ``row`` rows). Needs ``%(namespaces)s``. First, one ``fp`` row: the stored embedder
    fingerprint (as ``id``), read in the statement's snapshot (:mod:`.fingerprint`).

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
    # ``complete``: the vectors the vector channel's completion reads (the first request's
    # candidates of other channels that it missed), without their rows (``vec`` rows), so
    # that no lookup by id follows the statement (a statement and a round trip).
    vector_rows = (
        f"""UNION ALL
SELECT 'vec', NULL, NULL, (m.namespace = %(tenant)s)::int, m.id, NULL, {nulls}, m.embedding
    FROM memories m WHERE m.id IN (SELECT id FROM hits WHERE req = 0 AND channel <> 'semantic'
        EXCEPT SELECT id FROM hits WHERE req = 0 AND channel = 'semantic'
        EXCEPT SELECT id FROM wanted)
    AND m.namespace = ANY(%(namespaces)s) AND m.embedding IS NOT NULL
"""
        if vectors and complete
        else ""
    )
    params.update(radius=radius, depth=depth, rows_depth=rows_depth)
    sql = f"""
WITH hits AS ({hits}),
{NEIGHBOUR_CTES},
wanted AS (SELECT id FROM hits WHERE n <= %(rows_depth)s UNION SELECT other FROM pairs)
SELECT 'row' AS kind, NULL::int AS req, NULL::text AS channel, (m.namespace = %(tenant)s)::int
    AS n, m.id, NULL::float8 AS score, {SELECT_COLUMNS}, {embedding}
    FROM memories m WHERE m.id IN (SELECT id FROM wanted) AND m.namespace = ANY(%(namespaces)s)
{vector_rows}UNION ALL
SELECT 'fp', NULL, NULL, NULL, {STORED_SQL}, NULL, {nulls}, NULL
UNION ALL
SELECT 'hit', req, channel, n, id, score, {nulls}, NULL FROM hits
UNION ALL
SELECT 'near', NULL, of_id, off, other, NULL, {nulls}, NULL FROM pairs
ORDER BY kind, req, channel, n"""
    return sql, params
