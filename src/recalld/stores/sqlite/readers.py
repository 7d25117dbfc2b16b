"""How the SQLite store answers each channel of :mod:`recalld.retrieval.channels`: one
reader per channel, each a function of the channel's ask and the :class:`Scope` of one call.

The word channel (``bm25``) is answered by the first of its engines that can
(:class:`WordEngine`): the word index beside a large store (:mod:`.word_index`, when the
``words`` extra is installed), else FTS5, which always can. A new engine is one module
with a :class:`WordEngine` and one line in :mod:`.word_engines`; an engine that only picks
the winners leaves their scores to FTS5 (:func:`rescored`).
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from recalld import lexical, threads
from recalld.records import TimeRange
from recalld.stores.asks import ChannelCandidate, EntitiesAsk, RecentAsk, TextAsk, WordsAsk, ranked
from recalld.stores.sqlite import queries as q, word_counts, word_scores

log = logging.getLogger("recalld")

_bm25_threads = threads.LazyPool(q.BM25_MAX_PARTS - 1, "recalld-bm25")


@dataclass(frozen=True)
class Scope:
    """What every reader of one :meth:`~recalld.stores.sqlite.store.SQLiteStore.candidates`
    call shares: the store's connections (each thread its own), the request's filters as
    SQL, the handle's namespaces, and whether reads may spread over threads."""

    connection: Callable[[], sqlite3.Connection]
    where: str
    params: list[object]
    visible: tuple[str, ...]
    spread: bool
    trivial: bool = False
    """The request's filters are the defaults (only the handle's live memories)."""
    pks_of: dict[str, int] | None = None
    """Where readers that know them note the row (pk) of each memory id they found, for the
    search's later reads by id (:meth:`.vector_reads.VectorReads.keeping_vectors`); None:
    not wanted."""
    lengths: word_scores.Lengths | None = None
    """The store's rows' token counts kept between searches (:mod:`.word_scores`); None:
    read at each search."""

    @property
    def db(self) -> sqlite3.Connection:
        """The calling thread's connection."""
        return self.connection()

    @functools.cached_property
    def rows_max(self) -> int:
        """The largest ``pk``: the store's size, as the size thresholds count it."""
        return rows_max(self.db)


Reader = Callable[[Any, Scope], list[ChannelCandidate]]
"""A channel's reader: its ask (of the type the channel makes) and the call's scope."""


def rows_max(db: sqlite3.Connection) -> int:
    (largest,) = db.execute("SELECT coalesce(max(pk), 0) FROM memories").fetchone()
    return int(largest)


class WordEngine(Protocol):
    """An engine behind the word channel: FTS5's BM25 of the request's terms, best first."""

    name: str

    def top(
        self, scope: Scope, terms: tuple[str, ...], limit: int
    ) -> list[tuple[str, float]] | None:
        """(id, -BM25) of the ``limit`` best rows passing the scope's filters, best first,
        ties by id; None when the engine cannot answer this time (the next one does)."""

    def after_write(self, db: sqlite3.Connection) -> None:
        """Bring the engine up to date after a committed write (never raises: a failure
        leaves it to answer None, or to catch up later)."""


class Fts5Words:
    """The word channel from FTS5 (``memories_fts``): every matching row scored (from
    :data:`.word_scores.MIN_ROWS` to :data:`.word_scores.MAX_ROWS` rows summed from FTS5's
    index by :mod:`.word_scores`, where that is exact; else by FTS5's ``bm25()``)."""

    name = "fts5"

    def top(
        self, scope: Scope, terms: tuple[str, ...], limit: int
    ) -> list[tuple[str, float]] | None:
        if word_scores.MIN_ROWS <= scope.rows_max < word_scores.MAX_ROWS:
            found = word_scores.best(
                scope.db, scope.lengths, scope.where, scope.params, terms, limit
            )
            if found is not None:
                return found
        return fts5_bm25(scope, "memories_fts", q.fts_match(terms), limit)

    def after_write(self, db: sqlite3.Connection) -> None:
        """FTS5 is kept by the store's own triggers, inside the write."""


FTS5 = Fts5Words()


# -- an engine's winners, scored by FTS5 -----------------------------------------------

WORDS_MARGIN = 10
"""Winners asked for beyond the limit (and a quarter of it): for the few that the filters
hide (forgotten and superseded rows stay in an engine's index, as in FTS5), and for rows
that an engine's own scores put just below the limit where FTS5's puts them in."""


@dataclass(frozen=True)
class Winners:
    """An engine's best rows: (pk, its own score) best first, and how many rows of the
    store hold each of the query's phrases (FTS5's document frequencies)."""

    rows: list[tuple[int, float]]
    holding: list[int]


def rescored(
    scope: Scope,
    phrases: list[list[str]],
    winners: Callable[[Scope, list[list[str]], int], Winners | None],
    limit: int,
) -> list[tuple[str, float]] | None:
    """A :meth:`WordEngine.top` from an engine that only picks the winners: its best
    ``limit`` + a quarter + :data:`WORDS_MARGIN` rows (then ``BM25_PREFETCH`` times the
    limit, when the filters hid some), joined with ``memories`` and the filters, and scored
    again with FTS5's exact BM25 (their true lengths, FTS5's own row and token counts:
    from each row's counts, :mod:`.word_counts`, where it has them and the phrases are
    single tokens, else from its text); None when ``winners`` cannot answer, or the filters
    hide more than that."""
    db = scope.db
    counting = word_counts.countable(phrases)
    for k in (limit + limit // 4 + WORDS_MARGIN, limit * q.BM25_PREFETCH):
        found = winners(scope, phrases, k)
        if found is None:
            return None
        pks = [pk for pk, _ in found.rows]
        read = _winners_read(db, scope, pks, counting)
        passed = {pk: (memory_id, counts, text) for pk, memory_id, counts, text in read}
        if scope.pks_of is not None:
            scope.pks_of.update((memory_id, pk) for pk, (memory_id, _, _) in passed.items())
        kept = [passed[pk] for pk, _ in found.rows if pk in passed]
        if len(kept) >= limit or len(found.rows) < k:
            exact = _fts5_scores(db, kept, phrases, found.holding)
            return sorted(
                ((memory_id, -score) for (memory_id, _, _), score in zip(kept, exact, strict=True)),
                key=lambda r: (r[1], r[0]),
            )[:limit]
    return None


def _winners_read(
    db: sqlite3.Connection, scope: Scope, pks: list[int], counting: bool
) -> sqlite3.Cursor:
    """The winners passing the filters as (pk, id, counts, text): with their counts where
    ``counting`` (the phrases can be scored from counts) and the row has them, else with
    their texts alone, as in a store of an older schema opened read-only (no migration
    ran, no ``word_counts``)."""
    params = [*pks, *scope.params]
    if counting:
        columns = "m.pk, m.id, w.counts, CASE WHEN w.counts IS NULL THEN m.content END"
        try:
            return db.execute(q.counted_pks_where_sql(scope.where, len(pks), columns), params)
        except sqlite3.OperationalError as exc:
            if "no such table: word_counts" not in str(exc):
                raise
    return db.execute(q.pks_where_sql(scope.where, len(pks), "m.pk, m.id, NULL, m.content"), params)


def _fts5_scores(
    db: sqlite3.Connection,
    kept: list[tuple[str, str | None, str | None]],
    phrases: list[list[str]],
    holding: list[int],
) -> list[float]:
    """FTS5's BM25 of each (id, counts, text) row: from its counts where it has them, else
    from its text; the same floats either way."""
    if not kept:
        return []
    (averages,) = db.execute(q.FTS_AVERAGES_SQL).fetchone()
    rows, total = lexical.varints(averages)[:2]
    counted = [i for i, (_, counts, _) in enumerate(kept) if counts is not None]
    texts = [i for i, (_, counts, _) in enumerate(kept) if counts is None]
    out = [0.0] * len(kept)
    if counted:
        scores = word_counts.scores(
            [kept[i][1] or "" for i in counted], phrases, holding, rows, total
        )
        for i, score in zip(counted, scores, strict=True):
            out[i] = score
    if texts:
        scores = lexical.bm25_many([kept[i][2] or "" for i in texts], phrases, rows, total, holding)
        for i, score in zip(texts, scores, strict=True):
            out[i] = score
    return out


def words(engines: Sequence[WordEngine], ask: WordsAsk, scope: Scope) -> list[ChannelCandidate]:
    """The word channel: the first engine's answer that is not None (no terms: no match)."""
    if not ask.terms:
        return []
    for engine in engines:
        rows = engine.top(scope, ask.terms, ask.limit)
        if rows is not None:
            return ranked((memory_id, -raw) for memory_id, raw in rows)
    raise AssertionError("FTS5 answers every word request")


def trigram(ask: TextAsk, scope: Scope) -> list[ChannelCandidate]:
    """The trigram channel: FTS5's BM25 over ``memories_trigram`` for the text's CJK
    3-grams."""
    grams, _ = lexical.trigram_terms(ask.text)
    if not grams:
        return []
    rows = fts5_bm25(scope, "memories_trigram", q.fts_match(grams), ask.limit)
    return ranked((memory_id, -raw) for memory_id, raw in rows)


def substring(ask: TextAsk, scope: Scope) -> list[ChannelCandidate]:
    """CJK pieces too short for the trigram index, found by a scan, newest first."""
    _, short = lexical.trigram_terms(ask.text)
    if not short:
        return []
    likes = [f"%{q.escape_like(s)}%" for s in short]
    found = scope.db.execute(
        q.like_sql(scope.where, len(likes)), [*likes, *scope.params, ask.limit]
    )
    return ranked((memory_id, 0.0) for (memory_id,) in found)


def entity(ask: EntitiesAsk, scope: Scope) -> list[ChannelCandidate]:
    """Memories carrying the ask's entities, by how many."""
    if not ask.entities:
        return []
    rows = scope.db.execute(
        q.entity_sql(scope.where, len(ask.entities)),
        [*ask.entities, *scope.params, ask.limit],
    ).fetchall()
    return ranked((r[0], float(r[1])) for r in rows)


def temporal(ask: RecentAsk, scope: Scope) -> list[ChannelCandidate]:
    """The newest memories (of the ask's time window, if any), by reference time."""
    where, params = within(ask.window, scope.where, scope.params)
    rows = scope.db.execute(q.temporal_sql(where), [*params, ask.limit])
    return ranked(rows.fetchall())


READERS: dict[str, Reader] = {
    "trigram": trigram,
    "substring": substring,
    "entity": entity,
    "temporal": temporal,
}
"""The readers that need nothing of the store but a connection; the store adds the vector
channels' and the word channel's, which hold its vector mirror and its word engines."""


def within(window: TimeRange | None, where: str, params: list[object]) -> tuple[str, list[object]]:
    """``where`` narrowed to the time ``window`` (if any)."""
    if window is None:
        return where, params
    extra, more = "", list(params)
    if window.start is not None:
        extra += " AND m.ref_time >= ?"
        more.append(window.start.timestamp())
    if window.end is not None:
        extra += " AND m.ref_time < ?"
        more.append(window.end.timestamp())
    return where + extra, more


# -- FTS5 BM25, the winners first -------------------------------------------------------


def fts5_bm25(scope: Scope, table: str, match: str, limit: int) -> list[tuple[str, float]]:
    """(id, SQLite bm25) best first: the winners ranked inside FTS5, then joined; on a
    small store the best matches marked by the filters (:func:`_marked`); on a large one,
    one query per core over its own rows, run at the same time and merged (the same result
    each way)."""
    largest = scope.rows_max
    if largest < q.BM25_WINNERS_MIN_ROWS:
        return _marked(scope, table, match, limit)
    parts = min(os.cpu_count() or 1, q.BM25_MAX_PARTS)
    if largest < q.BM25_SPLIT_MIN_ROWS or parts < 2 or not scope.spread:
        return _winners(scope, table, match, limit, None)
    part = partial(_winners, scope, table, match, limit)  # each thread its own connection
    first, *rest = q.bm25_spans(largest, parts)
    found, others = _bm25_threads.run_beside(
        partial(part, first), [partial(part, span) for span in rest]
    )
    merged = found + [row for other in others for row in other]
    return sorted(merged, key=lambda r: (r[1], r[0]))[:limit]


def _full_join(scope: Scope, table: str, match: str, limit: int) -> list[tuple[str, float]]:
    """Every match joined with ``memories``, filtered, then ranked."""
    rows = scope.db.execute(q.bm25_sql(table, scope.where), [match, *scope.params, limit])
    return [(memory_id, float(raw)) for memory_id, raw in rows.fetchall()]


def _marked(scope: Scope, table: str, match: str, limit: int) -> list[tuple[str, float]]:
    """The full join's answer from the ``limit`` + a quarter + :data:`WORDS_MARGIN` best
    matches alone (:func:`~.queries.bm25_marked_sql`): FTS5 still scores every match, but
    only those rows are read from ``memories`` (a match joined cost about as much as its
    score: 10k rows, reads of 260 matches or more 0.8-0.85x the CPU, of fewer 0.95-1.04x).

    Exact when the inner set holds every match, or when the ``limit`` rows that pass the
    filters all score below the inner set's worst: every row scoring below that is in the
    set, so no row left out could rank among them (a tie with the worst, which the full
    join orders by id, could). Otherwise the full join (filters that hid most matches)."""
    inner = limit + limit // 4 + WORDS_MARGIN
    rows = scope.db.execute(
        q.bm25_marked_sql(table, scope.where), [*scope.params, match, inner]
    ).fetchall()
    # Sorted here rather than by a second sorter in SQLite (cheaper for a few matches); a
    # str compares as SQLite's BINARY compares UTF-8, so the order is the full join's.
    rows.sort(key=lambda row: (row[1], row[0]))
    kept = [(memory_id, float(raw)) for memory_id, raw, passes in rows if passes][:limit]
    if len(rows) < inner or (len(kept) == limit and kept[-1][1] < rows[-1][1]):
        return kept
    return _full_join(scope, table, match, limit)


def _winners(
    scope: Scope, table: str, match: str, limit: int, span: tuple[int, int] | None
) -> list[tuple[str, float]]:
    """The winners-first BM25 (of the rows in ``span`` only, when given), falling back
    to the full join when the filters hid winners."""
    db, where, params = scope.db, scope.where, scope.params
    bounds = list(span or ())
    inner = limit * q.BM25_PREFETCH
    ranged = span is not None
    rows = db.execute(
        q.bm25_winners_sql(table, where, ranged), [match, *bounds, inner, *params, limit]
    ).fetchall()
    if len(rows) < limit:
        (matched,) = db.execute(q.bm25_count_sql(table, ranged), [match, *bounds, inner]).fetchone()
        if matched >= inner:  # the filters hid winners: rank every match instead
            rows = db.execute(
                q.bm25_sql(table, where, ranged), [match, *bounds, *params, limit]
            ).fetchall()
    return [(memory_id, float(raw)) for memory_id, raw in rows]
