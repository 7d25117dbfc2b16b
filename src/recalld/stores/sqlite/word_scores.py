"""FTS5's BM25 of every match on a mid-sized store, summed here instead of by FTS5's ``bm25()``.

Without the word index (:mod:`.word_index`), the word channel ranks every row matching the
query (see :func:`.readers.fts5_bm25`); from :data:`MIN_ROWS` to :data:`MAX_ROWS` rows it does
so here. FTS5's ``bm25()`` scores each match before its ``ORDER BY ... LIMIT``: for each one
it collects the phrases' instances and looks up the row's token count with a statement of its
own (``SELECT sz FROM memories_fts_docsize WHERE id=?``), about 1.3 us a match. What the
score takes of a row is that count and how often each query token occurs in it. Here:

- each query token's rows, with repeats (one per occurrence), come from one walk of its list
  in FTS5's index, through a connection's own (``temp``) ``fts5vocab`` view (``instance``),
  aggregated inside SQLite into one string;
- each row's token count comes from :class:`Lengths`: read from ``memories_fts_docsize``
  the first time a search needs it, kept for later searches while the connection sees no
  commit (``PRAGMA data_version`` and its own ``total_changes``);
- the sum is FTS5's (``fts5_aux.c``), term by term in the query's phrase order, over numpy
  arrays: the operations of :func:`recalld.lexical.bm25_many` (whose floats a contract test
  holds equal to ``bm25()``'s) elementwise, so the scores are the same floats;
- the best rows are read from ``memories`` with the filters, best first, in blocks cut at a
  score (ties with the cut included), until ``limit`` pass: every row left unread scores
  below every row read, so the answer is the full join's, ties ordered by id.

A phrase of several tokens (a quoted term FTS5 splits, e.g. ``e-mail``) occurs where its
first token does and each later one follows it: its tokens' walks carry their offsets too.
Not taken (None: the caller runs FTS5's own scoring) for a token kept as a digest
(:data:`recalld.lexical.MAX_TOKEN_BYTES`), a row without a recorded size, or filters that
hide so many matches that more than :data:`MAX_READ` rows would be read.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from recalld import lexical
from recalld.stores.sqlite import queries as q
from recalld.stores.sqlite.unchanged import Unchanged

INSTANCES_TABLE = "recalld_fts_instances"
"""A connection's own (``temp``) ``fts5vocab`` view of ``memories_fts``: nothing is added
to the store's schema."""
MIN_ROWS = 20_000
"""Stores from this many rows (the largest pk) take this path. Below it FTS5 ranks its best
matches marked by the filters (:func:`.readers.fts5_bm25`) at about the same cost: whole
searches at 10k cost 0.92-1.04x with this path in four runs, and a search right after a
commit, which reads the rows' lengths again, 1.17x a word read (docs/design/search-cpu.md)."""
MAX_ROWS = 200_000
"""Stores below this many rows (the largest pk) take this path: measured at 10k and 100k
(where ``bm25()`` ranks every match in one statement, see :func:`.readers.fts5_bm25`); from
``BM25_SPLIT_MIN_ROWS`` FTS5's scoring is split over the cores instead, and each
connection would keep a count for every one of a million rows."""
MAX_READ = 4_000
"""Rows read from ``memories`` beyond which FTS5's own join is left to rank them (filters
that hide most matches): one statement's ``IN`` list stays well under SQLite's limit on
parameters."""

_CREATE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{INSTANCES_TABLE}"
    " USING fts5vocab(main, memories_fts, instance)"
)
_WALK = f"SELECT group_concat(doc), NULL FROM temp.{INSTANCES_TABLE} WHERE term = ?"
"""A token's rows, one per occurrence (``doc`` is the row's pk), as one string: a row of
Python per occurrence cost more than FTS5's own scoring."""
_WALK_AT = (
    f"SELECT group_concat(doc), group_concat(offset) FROM temp.{INSTANCES_TABLE} WHERE term = ?"
)
"""The same walk with each occurrence's offset (its token's place in the row), in the same
order, for phrases of several tokens."""
_OFFSET_BITS = 32
"""A (pk, offset) pair as one integer: pk << 32 | offset."""

_SIZES = (
    "SELECT group_concat(d.id), group_concat(CASE WHEN length(d.sz) = 1"
    " THEN coalesce(unicode(CAST(d.sz AS TEXT)), 0) ELSE -1 END)"
    " FROM json_each(?) j JOIN memories_fts_docsize d ON d.id = j.value"
)
"""Rows' token counts (FTS5's ``docsize``: one varint for the one column) as two strings:
a count under 128 is the varint's one byte, read as a character inside SQLite (NUL, an
empty row, reads as NULL: 0); a longer varint is -1, read again by :data:`_LONG_SIZES`."""
_LONG_SIZES = "SELECT id, sz FROM memories_fts_docsize WHERE id IN (SELECT value FROM json_each(?))"

Ints = npt.NDArray[np.int64]
Sizes = npt.NDArray[np.int32]
Runs = tuple[Ints, Ints]
"""Rows (pks, ascending) and a count for each."""


class Lengths:
    """Each row's token count, per connection, as read in a snapshot the connection has
    seen no commit since (:mod:`.unchanged`). One per store; a connection's entry is used
    only while the search holds its own read transaction, so a caller's transaction (whose
    writes a rollback could undo) never fills it."""

    def __init__(self) -> None:
        self._kept = Unchanged(_known)

    def known(self, db: sqlite3.Connection) -> _Known:
        """The connection's counts, emptied if it saw a commit since they were read (call
        inside the read transaction the counts are used in)."""
        return self._kept.state(db)


def _known(db: sqlite3.Connection) -> _Known:
    db.execute(_CREATE)
    return _Known()


class _Known:
    __slots__ = ("sizes",)

    def __init__(self) -> None:
        self.sizes: Sizes = np.full(0, -1, dtype=np.int32)
        """Token count by pk; -1: not read yet."""


def best(
    db: sqlite3.Connection,
    lengths: Lengths | None,
    where: str,
    params: Sequence[object],
    terms: Sequence[str],
    limit: int,
) -> list[tuple[str, float]] | None:
    """(id, SQLite ``bm25()``) of the ``limit`` best rows of ``memories_fts`` for ``terms``
    OR-ed (as :func:`.queries.fts_match` quotes them) that pass ``where``, best first, ties
    by id: the full join's answer (:func:`.queries.bm25_sql`); None where this path is not
    exact (see the module)."""
    phrases = lexical.phrases(terms)
    if any(token.startswith(lexical.DIGEST_PREFIX) for phrase in phrases for token in phrase):
        return None
    if not phrases:
        return []
    own = not db.in_transaction
    if own:
        db.execute("BEGIN")  # one snapshot for the counts, the rows and their filters
    try:
        (averages,) = db.execute(q.FTS_AVERAGES_SQL).fetchone()
        rows, total = [*lexical.varints(averages), 0, 0][:2]
        if not rows:  # no row indexed yet (the averages record is empty): FTS5 answers
            return None
        known = lengths.known(db) if lengths is not None and own else None
        if known is None:
            db.execute(_CREATE)
        return _best(db, known, where, params, phrases, limit, (rows, total))
    finally:
        if own:
            db.execute("COMMIT")


def _best(
    db: sqlite3.Connection,
    known: _Known | None,
    where: str,
    params: Sequence[object],
    phrases: list[list[str]],
    limit: int,
    counted: tuple[int, int],
) -> list[tuple[str, float]] | None:
    rows, total = counted
    holding = _holding(db, phrases)
    if not holding:
        return []
    docs = np.unique(np.concatenate([pks for pks, _ in holding.values()]))
    sizes = _sizes(db, known, docs)
    if sizes is None:
        return None
    # FTS5's sum (as lexical.bm25_many writes it), each operation over every row at once.
    avgdl = total / rows
    norm = lexical.K1 * (1 - lexical.B + lexical.B * sizes.astype(np.float64) / avgdl)
    score = np.zeros(len(docs), dtype=np.float64)
    for phrase in phrases:
        if tuple(phrase) not in holding:
            continue
        pks, counts = holding[tuple(phrase)]
        weight = lexical.idf(rows, len(pks))
        at = np.searchsorted(docs, pks)
        f = counts.astype(np.float64)
        score[at] += weight * (f * (lexical.K1 + 1.0) / (f + norm[at]))
    return _read_best(db, where, params, docs, -score, limit)


def _holding(db: sqlite3.Connection, phrases: list[list[str]]) -> dict[tuple[str, ...], Runs]:
    """Each phrase's rows (pks, ascending) and its occurrences in each, for the phrases some
    row holds. A phrase of several tokens occurs where its first token does and each later
    one follows at the next offset (overlaps count, as in FTS5)."""
    at = any(len(phrase) > 1 for phrase in phrases)
    walked: dict[str, tuple[Ints, Ints]] = {}
    """Each token's (pk, offset) per occurrence, ordered by both."""
    for token in {token for phrase in phrases for token in phrase}:
        found, offsets = db.execute(_WALK_AT if at else _WALK, (token,)).fetchone()
        if found:
            docs = np.fromstring(found, dtype=np.int64, sep=",")
            walked[token] = docs, np.fromstring(offsets, dtype=np.int64, sep=",") if at else docs
    holding: dict[tuple[str, ...], Runs] = {}
    for phrase in map(tuple, phrases):
        if phrase in holding or any(token not in walked for token in phrase):
            continue
        docs, offsets = walked[phrase[0]]
        if len(phrase) > 1:
            starts = (docs << _OFFSET_BITS) | offsets
            held = np.ones(len(starts), dtype=bool)
            for i, token in enumerate(phrase[1:], 1):
                later = np.sort((walked[token][0] << _OFFSET_BITS) | walked[token][1])
                wanted = starts + i
                where = np.minimum(np.searchsorted(later, wanted), len(later) - 1)
                held &= later[where] == wanted
            docs = docs[held]
        if len(docs):
            holding[phrase] = _runs(docs)
    return holding


def _runs(docs: Ints) -> Runs:
    """The distinct values of ``docs`` ascending, and how often each occurs (the walk lists
    a token's rows in order, one per occurrence; sorted here if not)."""
    if len(docs) > 1 and not bool(np.all(docs[1:] >= docs[:-1])):
        docs = np.sort(docs)
    starts = np.flatnonzero(np.diff(docs, prepend=-1))
    return docs[starts], np.diff(starts, append=len(docs))


def _sizes(db: sqlite3.Connection, known: _Known | None, docs: Ints) -> Sizes | None:
    """Each of ``docs``' token count (None when one has none recorded)."""
    if known is None:
        found, counts = _read_sizes(db, docs)
        if len(found) < len(docs):
            return None
        sizes = np.empty(len(docs), dtype=np.int32)
        sizes[np.searchsorted(docs, found)] = counts
        return sizes
    if len(known.sizes) <= docs[-1]:
        grown = np.full(int(docs[-1]) + 1, -1, dtype=np.int32)
        grown[: len(known.sizes)] = known.sizes
        known.sizes = grown
    missing = docs[known.sizes[docs] < 0]
    if len(missing):
        found, counts = _read_sizes(db, missing)
        if len(found) < len(missing):
            return None
        known.sizes[found] = counts
    return known.sizes[docs]


def _read_sizes(db: sqlite3.Connection, pks: Ints) -> tuple[Ints, Ints]:
    """(pk, token count) of those of ``pks`` that have a size recorded, in no order."""
    (found, counts) = db.execute(_SIZES, (json.dumps(pks.tolist()),)).fetchone()
    if not found:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    ids = np.fromstring(found, dtype=np.int64, sep=",")
    sizes = np.fromstring(counts, dtype=np.int64, sep=",")
    long = sizes < 0
    if long.any():  # 128 tokens or more: a varint of several bytes
        wanted = json.dumps(ids[long].tolist())
        read = {pk: lexical.first_varint(sz) for pk, sz in db.execute(_LONG_SIZES, (wanted,))}
        sizes[long] = [read[pk] for pk in ids[long].tolist()]
    return ids, sizes


def _read_best(
    db: sqlite3.Connection,
    where: str,
    params: Sequence[object],
    docs: Ints,
    raw: npt.NDArray[np.float64],
    limit: int,
) -> list[tuple[str, float]] | None:
    """The ``limit`` best of ``docs`` (scored ``raw``, lower is better) that pass ``where``,
    ties by id: read best first in blocks, each ending at a score with every row tied with
    it, until ``limit`` rows passed or every match was read."""
    order = np.argsort(raw, kind="stable")
    ranked = raw[order]
    passed: list[tuple[float, str]] = []
    start = 0
    step = limit
    while start < len(order) and len(passed) < limit:
        end = min(start + step, len(order))
        end = int(np.searchsorted(ranked, ranked[end - 1], side="right"))
        if end > MAX_READ:
            return None
        pks = order[start:end]
        scores = dict(zip(docs[pks].tolist(), ranked[start:end].tolist(), strict=True))
        sql = q.pks_where_sql(where, len(scores), "m.pk, m.id")
        passed.extend(
            (scores[pk], memory_id) for pk, memory_id in db.execute(sql, [*scores, *params])
        )
        start, step = end, 2 * step
    passed.sort()
    return [(memory_id, score) for score, memory_id in passed[:limit]]
