"""SQL builders for the SQLite store: building a query is separate from running it."""

from __future__ import annotations

import json
from collections.abc import Sequence

from recalld.records import MemoryFilter
from recalld.stores.rows import ts

Params = list[object]


def namespace_sql(namespaces: Sequence[str], alias: str = "m") -> tuple[str, Params]:
    """The tenant wall: rows of these namespaces only (never empty: no namespace, no row)."""
    return f"{alias}.namespace IN ({','.join('?' * len(namespaces))})", Params(namespaces)


def outside_sql(namespaces: Sequence[str]) -> tuple[str, Params]:
    """Rows of every other namespace, as ranges an index on ``namespace`` answers at once
    (``NOT IN`` would scan the table)."""
    names = sorted(namespaces)
    ranges = ["namespace < ?"]
    params = Params([names[0]])
    for low, high in zip(names, names[1:], strict=False):
        ranges.append("(namespace > ? AND namespace < ?)")
        params.extend([low, high])
    ranges.append("namespace > ?")
    params.append(names[-1])
    return "(" + " OR ".join(ranges) + ")", params


def filter_sql(
    filters: MemoryFilter, namespaces: Sequence[str], alias: str = "m"
) -> tuple[str, Params]:
    """A WHERE clause (without ``WHERE``) over ``memories AS alias``, confined to
    ``namespaces``; never empty."""
    wall, params = namespace_sql(namespaces, alias)
    clauses: list[str] = [wall]
    if not filters.include_forgotten:
        clauses.append(f"{alias}.forgotten_at IS NULL")
    if not filters.include_superseded:
        clauses.append(f"{alias}.superseded_by IS NULL")
    for column in ("project", "scope", "session_id", "superseded_by"):
        value = getattr(filters, column)
        if value is not None:
            clauses.append(f"{alias}.{column} = ?")
            params.append(value)
    if filters.types:
        clauses.append(f"{alias}.type IN ({','.join('?' * len(filters.types))})")
        params.extend(filters.types)
    clauses.extend(_tags_sql(filters.tags, alias, params))
    if filters.time_range is not None:
        if filters.time_range.start is not None:
            clauses.append(f"{alias}.ref_time >= ?")
            params.append(ts(filters.time_range.start))
        if filters.time_range.end is not None:
            clauses.append(f"{alias}.ref_time < ?")
            params.append(ts(filters.time_range.end))
    return (" AND ".join(clauses) or "1"), params


TAG_CLAUSES_MAX = 8
"""Up to this many tags, each is one ``EXISTS`` (a primary-key lookup); more tags go in one
clause that counts a memory's tags among them: SQLite parses at most 1,000 levels of
expression, and a chain of 999 ``AND EXISTS`` passed it (the store failed the search)."""


def _tags_sql(tags: Sequence[str], alias: str, params: Params) -> list[str]:
    """Clauses for "carries every one of ``tags``"; their parameters appended to ``params``."""
    if len(tags) <= TAG_CLAUSES_MAX:
        params.extend(tags)
        return [
            f"EXISTS (SELECT 1 FROM memory_tags t WHERE t.pk = {alias}.pk AND t.tag = ?)"
            for _ in tags
        ]
    wanted = sorted(set(tags))
    params.extend([json.dumps(wanted), len(wanted)])
    return [
        f"(SELECT count(*) FROM memory_tags t WHERE t.pk = {alias}.pk AND t.tag IN"
        " (SELECT value FROM json_each(?))) = ?"
    ]


def is_trivial(filters: MemoryFilter) -> bool:
    """True when the filter only hides forgotten memories (the common search case)."""
    return filters == MemoryFilter() or filters == MemoryFilter(include_superseded=True)


def fts_match(terms: tuple[str, ...]) -> str:
    """An FTS5 MATCH expression OR-ing the quoted terms (quotes inside terms doubled)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _span(table: str, ranged: bool) -> str:
    """The rowid bounds (parameters: from, to) of one part of a split BM25 query."""
    return f" AND {table}.rowid >= ? AND {table}.rowid < ?" if ranged else ""


def bm25_sql(table: str, where: str, ranged: bool = False) -> str:
    """Rank rows of an FTS5 table by BM25 (lower is better in SQLite, so ascending);
    parameters: match, [from, to when ``ranged``,] filter params, limit."""
    return (
        f"SELECT m.id, bm25({table}) AS score FROM {table} JOIN memories m ON m.pk = {table}.rowid"
        f" WHERE {table} MATCH ?{_span(table, ranged)} AND {where} ORDER BY score, m.id LIMIT ?"
    )


def bm25_marked_sql(table: str, where: str) -> str:
    """The best rows of an FTS5 table by BM25 alone (ranked inside FTS5, parameters: filter
    params, match, inner limit), each joined with ``memories`` and marked by whether it
    passes ``where`` (1, else 0 or NULL), in no order (the caller sorts them by score then
    id): the rows that fail the filters are read once, not joined for every match."""
    return (
        f"SELECT m.id, w.score, {where} FROM (SELECT rowid, bm25({table}) AS score FROM {table}"
        f" WHERE {table} MATCH ? ORDER BY score LIMIT ?) w JOIN memories m ON m.pk = w.rowid"
    )


BM25_PREFETCH = 4
"""The winners-first BM25 query ranks this many times the limit inside FTS5 before joining
them with ``memories`` and the filters."""
BM25_WINNERS_MIN_ROWS = 20_000
"""Below this many rows (the largest ``pk``), BM25 ranks its best matches inside FTS5 and
marks each by the filters (:func:`bm25_marked_sql`), rather than the winners-first query,
which would often need a second pass over the index to check that the filters hid none (on
the LongMemEval_S stores, 1.4 index passes a search)."""
BM25_SPLIT_MIN_ROWS = 200_000
"""From this many rows, while the machine is not busy (:func:`recalld.threads.machine_busy`),
BM25 runs as one query per core, each over its own range of rows
(:func:`bm25_spans`), merged after: FTS5 scores every row that holds a query word (about
80 ms a search at 1M memories), and each part's scores are the whole query's (FTS5 counts
a word's rows over the whole table), so the merged top is the same."""
BM25_MAX_PARTS = 4


def bm25_spans(rows_max: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` rowid ranges [from, to) of near-equal length covering 1..``rows_max``."""
    step = -(-rows_max // parts)
    return [(1 + min(rows_max, i * step), 1 + min(rows_max, (i + 1) * step)) for i in range(parts)]


def bm25_count_sql(table: str, ranged: bool = False) -> str:
    """Whether the index holds at least the limit's worth of matches (parameters: match,
    [from, to,] count)."""
    return (
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ?"
        f"{_span(table, ranged)} LIMIT ?)"
    )


def pks_where_sql(where: str, count: int, columns: str = "m.pk, m.id, m.content") -> str:
    """``columns`` of the rows among ``count`` pks that pass ``where`` (parameters: the pks,
    then the filter's). ``NOT INDEXED``: the rows are read by pk, never by scanning the
    namespace or forgotten index that the planner would otherwise prefer."""
    return (
        f"SELECT {columns} FROM memories m NOT INDEXED"
        f" WHERE m.pk IN ({','.join('?' * count)}) AND ({where})"
    )


def counted_pks_where_sql(where: str, count: int, columns: str) -> str:
    """:func:`pks_where_sql` with each row's token counts beside it (``w.counts``, NULL
    where the row has none: :mod:`.word_counts`)."""
    return (
        f"SELECT {columns} FROM memories m NOT INDEXED LEFT JOIN word_counts w ON w.pk = m.pk"
        f" WHERE m.pk IN ({','.join('?' * count)}) AND ({where})"
    )


def capped_count_sql(where: str) -> str:
    """How many rows of ``memories m`` pass ``where``, counted up to a limit (the last
    parameter)."""
    return f"SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {where} LIMIT ?)"


FTS_AVERAGES_SQL = "SELECT block FROM memories_fts_data WHERE id = 1"
"""FTS5's averages record: varints of the table's rows, then its tokens (what ``bm25()``
takes N and the mean length from)."""


def bm25_winners_sql(table: str, where: str, ranged: bool = False) -> str:
    """BM25 ranked inside FTS5 first (parameters: match, [from, to,] inner limit, filter
    params, limit), then only the winners joined with ``memories`` and filtered: a common
    word no longer joins every matching row. When the filters leave fewer than the limit of
    a full inner set, the caller runs :func:`bm25_sql` instead, so the result is the same."""
    return (
        f"SELECT m.id, w.score FROM (SELECT rowid, bm25({table}) AS score FROM {table}"
        f" WHERE {table} MATCH ?{_span(table, ranged)} ORDER BY score LIMIT ?) w"
        f" JOIN memories m ON m.pk = w.rowid WHERE {where} ORDER BY w.score, m.id LIMIT ?"
    )


def like_sql(where: str, count: int) -> str:
    likes = " OR ".join(["m.content LIKE ? ESCAPE '\\'"] * count)
    return (
        f"SELECT m.id FROM memories m WHERE ({likes}) AND {where}"
        " ORDER BY m.ref_time DESC, m.id DESC LIMIT ?"
    )


def entity_sql(where: str, count: int) -> str:
    marks = ",".join("?" * count)
    return (
        "SELECT m.id, COUNT(*) AS overlap FROM memory_entities e JOIN memories m ON m.pk = e.pk"
        f" WHERE e.entity IN ({marks}) AND {where}"
        " GROUP BY m.pk ORDER BY overlap DESC, m.ref_time DESC, m.id LIMIT ?"
    )


def temporal_sql(where: str) -> str:
    return (
        f"SELECT m.id, m.ref_time FROM memories m WHERE {where}"
        " ORDER BY m.ref_time DESC, m.id DESC LIMIT ?"
    )


def escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# -- indexed source files ----------------------------------------------------------------

UPSERT_ROOT_SQL = (
    "INSERT INTO source_roots (namespace, path, globs, added_at, indexed_at, name)"
    " VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(namespace, path) DO UPDATE SET globs = excluded.globs,"
    " indexed_at = COALESCE(excluded.indexed_at, source_roots.indexed_at),"
    " name = COALESCE(excluded.name, source_roots.name)"
)
UPSERT_FILE_SQL = (
    "INSERT OR REPLACE INTO source_files"
    " (namespace, path, root, size, mtime_ns, status, content_hash, chunker, error, indexed_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DELETE_FILE_CHUNKS_SQL = (
    "DELETE FROM memories WHERE namespace = ? AND source_kind = 'file' AND type = 'chunk'"
    " AND source_path = ?"
)


def source_files_sql(namespace: str, roots: Sequence[str] | None) -> tuple[str, Params]:
    """One namespace's tracked files with their live chunk counts, ordered by path."""
    where, params = "f.namespace = ?", Params([namespace])
    if roots is not None:
        where += f" AND f.root IN ({','.join('?' * len(roots))})" if roots else " AND 0"
        params.extend(roots)
    return (
        "SELECT f.*, (SELECT COUNT(*) FROM memories m WHERE m.namespace = f.namespace"
        " AND m.source_kind = 'file' AND m.type = 'chunk' AND m.source_path = f.path"
        " AND m.forgotten_at IS NULL) AS chunks"
        f" FROM source_files f WHERE {where} ORDER BY f.path",
        params,
    )
