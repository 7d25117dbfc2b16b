"""The word channel's SQL on PostgreSQL: FTS5's BM25 of a question's phrases (see
:mod:`recalld.lexical`) computed in SQL, and the engines that choose how its rows are found
(every row holding a phrase, a tenant's rows in one pass, a tenant's word postings); each
engine's rows and scores are the same. :mod:`.queries` composes them with the other
channels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from recalld.lexical import IDF_FLOOR, K1, B

Params = dict[str, Any]
"""A statement's named (``%(name)s``) parameters."""
LEXEME_BYTES_MAX = 2046
"""The longest word a ``tsvector`` holds (PostgreSQL's limit; :mod:`recalld.lexical` stores
longer tokens as a 65-byte digest, so a token of the store never exceeds it): a longer one
gives a row no word set (migration 12) and is never a word of :func:`words_query`."""


def literal(text: str) -> str:
    """``text`` as an SQL string literal (namespaces are validated names; quoted anyway)."""
    return "'" + text.replace("'", "''") + "'"


def _f(value: float) -> str:
    return f"{value!r}::float8"


def phrase_hits(query: Sequence[Sequence[str]]) -> tuple[list[str], Params]:
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


def words_query(tokens: Sequence[str]) -> str | None:
    """The ``tsquery`` (as text) that a row's ``lex_set`` (migration 12) matches when it holds
    any of ``tokens``: each a quoted word, taken as it is (a quote doubled, a backslash
    escaped; the operators and spaces inside quotes are the word's). None when no token can
    be a set's word (only the rows without a set can hold those: :func:`holds_any`)."""
    words = [t for t in dict.fromkeys(tokens) if t and len(t.encode()) <= LEXEME_BYTES_MAX]
    quoted = ("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in words)
    return " | ".join(quoted) or None


def holds_any(tokens: Sequence[str], params: Params) -> str:
    """A row ``m`` holding any of ``tokens``, tested on its set of distinct tokens (a binary
    search a token; ``&&`` on its tokens compared every pair, five times as long), or on its
    tokens when it has no set (more than a set holds: ``migrations_words``); sets
    ``params`` ``lex_words`` and ``lex_firsts``."""
    params["lex_firsts"] = list(tokens)
    params["lex_words"] = words_query(tokens)
    return (
        "(m.lex_set @@ %(lex_words)s::tsquery"
        " OR (m.lex_set IS NULL AND m.lex_tokens && %(lex_firsts)s::text[]))"
    )


def _term(k: int, hits: str, length: str) -> str:
    """Phrase ``k``'s part of a row's BM25: its idf ``i.idf{k}`` times the weight of its
    ``hits`` in a row of ``length`` (float8 expressions)."""
    return (
        f"i.idf{k} * (({hits} * ({_f(K1)} + 1.0::float8)) / ({hits} + {_f(K1)} *"
        f" (1.0::float8 - {_f(B)} + {_f(B)} * {length} / i.avgdl)))"
    )


def _score(n: int) -> str:
    """A row's BM25 from its hits ``h.f{k}`` and length ``h.dl`` and the idfs ``i``. A
    phrase the row does not hold adds ``0.0`` without computing its term (which is ``0.0``:
    a positive idf times 0 over a positive weight), so the sum is the same, and a phrase
    slot left empty (:func:`padded`) costs a test."""
    return "0::float8" + "".join(
        f" + CASE WHEN h.f{k} > 0 THEN {_term(k, f'h.f{k}', 'h.dl')} ELSE 0::float8 END"
        for k in range(n)
    )


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


def bm25_rows(n: int) -> str:
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
    and :func:`bm25_rows`'s."""
    hits, params = phrase_hits(query)
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
    return [lex_hit, *_idf(n, f"{counted} FROM lex_hit h WHERE {any_hit}"), bm25_rows(n)], params


def scan_ctes(query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
    """:func:`bm25_ctes`'s rows, order and scores from one pass over the namespaces' rows
    (read by a namespace index, each tested for the phrases' first tokens), instead of one
    read of the table's GIN index per phrase: for a tenant of few memories, a common word's
    index entries span every tenant's rows, and reading them cost more than testing the
    tenant's own rows (:func:`indexes.scans_rows`)."""
    holds_params: Params = {}
    holds = holds_any([phrase[0] for phrase in query], holds_params)
    query = padded(query)
    hits, params = uniform_hits(query)
    params.update(holds_params)
    n = len(query)
    columns = ", ".join(f"{hit} AS f{i}" for i, hit in enumerate(hits))
    lex_hit = (
        "lex_hit AS MATERIALIZED (SELECT m.id, m.ref_time, m.pk, m.lex_length::float8 AS dl,"
        f" ({where}) AS ok, {columns} FROM memories m WHERE m.namespace = ANY(%(namespaces)s)"
        f" AND {holds})"
    )
    counted = ", ".join(f"count(*) FILTER (WHERE h.f{i} > 0)::float8 AS n{i}" for i in range(n))
    return [
        lex_hit,
        *_idf(n, f"{counted} FROM lex_hit h WHERE {_any_hit(n)}"),
        bm25_rows(n),
    ], params


PHRASES_PADDED_MIN = 4
"""The one pass's statement (:func:`scan_ctes`) names its phrases in a number of slots
that is this or a power of two times it, the question's phrases then phrases that match
nothing, so that its text is one of few (one per number of slots, whatever the phrases):
psycopg prepares a text after a few uses, and a small tenant's prepared statements run on
a plan made once (:mod:`.plans`), where a text per number of phrases was parsed and
planned at every search."""


def padded(query: Sequence[Sequence[str]]) -> list[list[str]]:
    """``query``'s phrases, then empty phrases (``[""]``: no token is empty, so none
    matches, and its part of a row's score is ``+ 0.0``, which changes no sum) up to
    :data:`PHRASES_PADDED_MIN` times a power of two."""
    slots = PHRASES_PADDED_MIN
    while slots < len(query):
        slots *= 2
    return [list(p) for p in query] + [[""]] * (slots - len(query))


def uniform_hits(query: Sequence[Sequence[str]]) -> tuple[list[str], Params]:
    """:func:`phrase_hits`'s counts in a text that depends only on the number of phrases
    (a phrase's tokens are a parameter, not its shape): an empty phrase counts 0 without
    reading the row, a phrase of one token its positions, a longer one its occurrences."""
    params: Params = {}
    hits = []
    for i, phrase in enumerate(query):
        params[f"lex_h{i}"], params[f"lex_p{i}"] = phrase[0], list(phrase)
        head, tokens = f"%(lex_h{i})s::text", f"%(lex_p{i})s::text[]"
        hits.append(
            f"CASE WHEN {head} = '' THEN 0::float8 WHEN cardinality({tokens}) = 1 THEN"
            f" cardinality(array_positions(m.lex_tokens, {head}))::float8 ELSE (SELECT count(*)"
            f" FROM unnest(array_positions(m.lex_tokens, {head})) AS a(at) WHERE"
            f" m.lex_tokens[a.at:a.at + cardinality({tokens}) - 1] = {tokens})::float8 END"
        )
    return hits, params


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


def _phrase_rows(ns: str, i: int, phrase: Sequence[str], params: Params) -> str:
    """The rows of the namespace ``ns`` holding every token of phrase ``i``: one postings
    read per distinct token, joined on the row, so that the planner (which knows each
    token's rows from the column's statistics) reads the rarest token's rows and looks the
    others up in them. Read whole and grouped instead, ``brother s`` read all 30,489 rows of
    ``s`` for 168 rows (46 ms against 1.7, the 100k tenant as the application's role)."""
    tokens = list(dict.fromkeys(phrase))
    for j, token in enumerate(tokens):
        params[f"lex_t{i}_{j}"] = token
    joins = "".join(
        f" JOIN word_postings t{j} ON t{j}.namespace = {ns}"
        f" AND t{j}.token = %(lex_t{i}_{j})s::text AND t{j}.pk = t0.pk"
        for j in range(1, len(tokens))
    )
    return (
        f"SELECT t0.pk FROM word_postings t0{joins} WHERE t0.namespace = {ns}"
        f" AND t0.token = %(lex_t{i}_0)s::text"
    )


def posting_scores(
    query: Sequence[Sequence[str]], namespace: str, kept: bool = True, within: bool = False
) -> tuple[list[str], Params]:
    """Every row of ``namespace`` holding a phrase of ``query``, with its exact score, from
    the namespace's postings: CTEs ending in ``lex_sum`` (``pk``, the row's length ``dl``,
    each phrase's hits ``f{i}``, its score ``near``), ``lex_idf`` (each phrase's idf over
    the namespace, as :func:`bm25_ctes` counts it) among them. The tails that read the best
    rows from the table follow (:func:`top_words_ctes`, :mod:`.word_filtered`).

    The postings are PostgreSQL migration 9's (``recalld postgres word-index``): per word,
    its rows with its count in each (``tf``) and the row's length (``dl``), in an index
    read alone. A phrase of one token takes its hits in a row from them; a phrase of
    several tokens finds the rows holding all of its tokens in them too and counts its hits
    in those rows. Each row's score is then computed from each phrase's hits and the row's
    length, the values :func:`bm25_ctes` counts on the row, through the same expression.

    ``kept``: ``lex_sum`` materialized, computed once however many CTEs read it; otherwise
    each reader computes it (:func:`top_words_ctes`, whose second reader runs only when the
    best rows do not prove the list). ``within``: only the rows of ``%(lex_w)s`` (pks, a
    BM25 index's winners: :mod:`.ranked`) are scored; each phrase's count of rows is still
    over all of its postings, so their scores are the same."""
    hits, params = phrase_hits(query)
    n = len(query)
    ns = literal(namespace)
    single = [i for i, phrase in enumerate(query) if len(phrase) == 1]
    multi = [i for i in range(n) if i not in single]
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
    rows = " AND p.pk = ANY(%(lex_w)s::bigint[])" if within else ""
    parts = [
        f"SELECT p.pk, p.dl, {i} AS i, p.tf::float8 AS f FROM word_postings p"
        f" WHERE p.namespace = {ns}" + posted.format(i=i) + rows
        for i in single
    ]
    ctes = [f"lex_n AS MATERIALIZED (SELECT {counts})"]
    if multi:
        # The rows holding each of a phrase's tokens, from the postings: B-tree reads by
        # leakproof equalities, which Row-Level Security lets the planner use. The GIN
        # index's containment test is not leakproof, so under the wall (the application's
        # role) it was a scan of the whole table (1.4-2.5 s a phrase in the 1M database).
        phrase_rows = " UNION ".join(_phrase_rows(ns, i, query[i], params) for i in multi)
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
    ctes += [
        *_idf(n, counted),
        # Each row's hits and length as bm25_ctes counts them on the row, so its score
        # (the same expression, in the same order) is the exact one.
        f"lex_sum AS {'' if kept else 'NOT '}MATERIALIZED (SELECT h.*, {_score(n)} AS near"
        " FROM (SELECT pk,"
        f" max(dl)::float8 AS dl, {pivot} FROM ({' UNION ALL '.join(parts)}) l GROUP BY pk) h,"
        " lex_idf i)",
    ]
    return ctes, params


def top_words_ctes(
    query: Sequence[Sequence[str]], where: str, namespace: str, within: bool = False
) -> tuple[list[str], Params]:
    """The word channel over a namespace's postings: :func:`bm25_ctes`'s rows, order and
    scores, without reading the table for every row holding a query word.

    Every row holding a phrase gets its exact score on the postings
    (:func:`posting_scores`), and only the best
    :data:`WORD_READ_FACTOR` times the list's length are read from the table (their ids,
    times and the search's filter; not their tokens); the others too only if one of them
    might still enter the list, which the filter dropping rows, or equal scores across the
    cut (ordered by id, not by row number), can make happen. ``within``: only the rows of a
    BM25 index's winners are scored (:func:`posting_scores`)."""
    # Not kept: the scored rows go straight into the sort for the best, not first into a
    # store of every row (36k rows, 4 MB, of a question of eight common words in the 1M
    # database, written to a temporary file). The 100k tenant's word statements of 100
    # questions: 1.5-1.8 ms less execution on average, 9-23 ms less for the heaviest, for
    # 0.8-1.1 ms more planning (``lex_hit_c``'s reading is planned too; it runs only when
    # the best rows do not prove the list), docs/design/postgres-statements.md.
    ctes, params = posting_scores(query, namespace, kept=False, within=within)
    n, ns = len(query), literal(namespace)
    read = f"(%(bm25_limit)s * {int(WORD_READ_FACTOR)} + {int(WORD_READ_EXTRA)})"
    columns = ", ".join(f"c.f{i}" for i in range(n))
    row = (
        f"SELECT m.id, m.ref_time, m.pk, c.dl, ({where}) AS ok, c.near, {columns}"
        f" FROM {{}} c JOIN memories m ON m.namespace = {ns} AND m.pk = c.pk"
    )
    ctes += [
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
    return [*ctes, bm25_rows(n)], params


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
class RankedPostings:
    """A namespace's word postings, of the rows of ``%(lex_w)s`` alone: a BM25 index's
    winners (:mod:`.ranked`), scored as :class:`Postings` scores them; for the same
    handles and filters, and questions whose phrases are single tokens."""

    namespace: str
    name = "ranked-postings"

    def ctes(self, query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
        return top_words_ctes(query, where, self.namespace, within=True)


@dataclass(frozen=True)
class TenantRows:
    """The rows of the namespaces seen, each tested for the phrases (:func:`scan_ctes`); for
    a handle that sees few memories (:func:`indexes.scans_rows`)."""

    name = "tenant-rows"

    def ctes(self, query: Sequence[Sequence[str]], where: str) -> tuple[list[str], Params]:
        return scan_ctes(query, where)


EVERY_ROW = EveryRow()
TENANT_ROWS = TenantRows()
