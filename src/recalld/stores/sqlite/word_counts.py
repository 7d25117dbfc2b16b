"""Each row's FTS5 token counts, written with the row, so that the word index's winners are
scored as FTS5 scores them without tokenizing them again (:func:`.readers.rescored`).

Why: on a large store the word index (:mod:`.word_index`) picks a question's best 260 rows
and the store scores them again with FTS5's exact BM25. That needed each row's length in
tokens and how often it holds each query token, which :func:`recalld.lexical.bm25_many`
got by putting the 260 texts through an in-memory FTS5 table: 4.5-6.4 ms of CPU a word
request at 100k, most of the word thread's time (docs/design/search-cpu.md). What BM25
takes of a row is its length and its count of each token; both are known when the row is
written, where its text is tokenized once (about 25 us for an ASCII text).

Layout: table ``word_counts`` (pk, counts), one row per memory whose counts were written:
``"<length>| <token>:<count> <token>:<count> ... "``, the tokens as :func:`recalld.lexical.
tokenize_many` gives them (FTS5's, each :func:`~recalld.lexical.stored`), once each in order
of first use. A query token's count is found by its ``" <token>:"`` (FTS5's tokens hold no
space, colon or bar; a token that did would make the row's counts unwritten).

Kept true by the schema (migration 14): a trigger deletes a row's counts when its content
changes or it is deleted, in the writing transaction, whoever writes (a plain SQL
``UPDATE`` too); the store's writes put them back with the new text (:func:`write`). A row without
counts (written before the table, or by a writer that does not write them) is tokenized
as before; :func:`fill_missing` writes the missing ones once the word index serves the
store. The scores are the same floats either way: the same terms summed in the same order
(:func:`scores`; ``tests/scale/test_word_counts.py``).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence

from recalld import lexical

log = logging.getLogger("recalld")

FORBIDDEN = (" ", ":", "|")
"""Characters the encoding gives a meaning to: a token holding one is not counted here."""
MISSING_FLAG = "word_counts_missing"
"""``meta`` key set by migration 14 on a store that had rows (some rows lack counts): the
pk up to which :func:`fill_missing` has written them."""
FILL_CHUNK = 2_000
"""Rows tokenized and written per transaction by :func:`fill_missing` (about 0.15 s: a
writer waits no longer than that)."""
FILL_CHUNKS = 7
"""Chunks a write's follow-up (:meth:`.word_index.WordIndex.sync`) fills at most: about a
second (100k rows took 7.7 s, 1M rows 74 s, on 2 cores), so a store upgraded at 1M is
filled over about 70 writes instead of one write waiting for a minute."""


def encoded(tokens: Sequence[str]) -> str | None:
    """A row's counts as stored, from its tokens in order (None: a token cannot be
    encoded)."""
    counts: dict[str, int] = {}
    for token in tokens:
        counts[token] = counts.get(token, 0) + 1
    if any(c in token for token in counts for c in FORBIDDEN):
        return None
    return f"{len(tokens)}| " + "".join(f"{token}:{n} " for token, n in counts.items())


def write(db: sqlite3.Connection, pks: Sequence[int], texts: Sequence[str]) -> None:
    """Write the counts of the rows ``pks`` whose contents are ``texts`` (inside the
    transaction that writes the rows)."""
    rows = [
        (pk, counts)
        for pk, tokens in zip(pks, lexical.tokenize_many(texts), strict=True)
        if (counts := encoded(tokens)) is not None
    ]
    db.executemany("INSERT OR REPLACE INTO word_counts (pk, counts) VALUES (?, ?)", rows)


def countable(phrases: Sequence[Sequence[str]]) -> bool:
    """Whether the phrases' hits can be read from counts: every phrase one token (a phrase
    of several needs the tokens' places), none holding a character of :data:`FORBIDDEN`,
    none kept as a digest (a token past :data:`recalld.lexical.MAX_TOKEN_BYTES`: the counts
    hold its digest, where the texts' tokenizing counts the token itself, as FTS5 does)."""
    return all(
        len(phrase) == 1
        and not phrase[0].startswith(lexical.DIGEST_PREFIX)
        and not any(c in phrase[0] for c in FORBIDDEN)
        for phrase in phrases
    )


def scores(
    counted: Sequence[str],
    phrases: Sequence[Sequence[str]],
    holding: Sequence[int],
    rows: int,
    total: int,
) -> list[float]:
    """FTS5's BM25 (higher is better, as :func:`recalld.lexical.bm25_many` gives it) of each
    row whose counts are ``counted``, for one-token ``phrases`` held by ``holding`` rows
    each, in a table of ``rows`` rows and ``total`` tokens: the same operations in the same
    order, so the same floats."""
    avgdl = total / rows
    k1, b = lexical.K1, lexical.B
    terms = [
        (f" {phrase[0]}:", lexical.idf(rows, n))
        for phrase, n in zip(phrases, holding, strict=True)
        if n
    ]
    out = [0.0] * len(counted)
    for i, counts in enumerate(counted):
        bar = counts.index("|")
        norm = k1 * (1 - b + b * int(counts[:bar]) / avgdl)
        score = 0.0
        for needle, weight in terms:
            at = counts.find(needle, bar)
            if at < 0:
                continue
            start = at + len(needle)
            f = int(counts[start : counts.index(" ", start)])
            score += weight * (f * (k1 + 1.0) / (f + norm))
        out[i] = score
    return out


def fill_missing(db: sqlite3.Connection, chunks: int | None = None) -> int:
    """Write the counts of the rows that lack them, when migration 14 said some do (its
    :data:`MISSING_FLAG` holds the pk they are written up to), a chunk a transaction (each
    chunk read and written under the write lock, so no row changes between its read and its
    counts), ``chunks`` of them at most (None: all; the rest is left for the next call);
    then clear the mark. Returns the rows written."""
    found = db.execute("SELECT value FROM meta WHERE key = ?", (MISSING_FLAG,)).fetchone()
    if found is None:
        return 0
    started, after, written, rows = time.monotonic(), int(found[0]), 0, []
    while chunks is None or written < chunks * FILL_CHUNK:
        db.execute("BEGIN IMMEDIATE")
        try:
            rows = db.execute(
                "SELECT m.pk, m.content FROM memories m WHERE m.pk > ? AND NOT EXISTS"
                " (SELECT 1 FROM word_counts w WHERE w.pk = m.pk) ORDER BY m.pk LIMIT ?",
                (after, FILL_CHUNK),
            ).fetchall()
            if rows:
                write(db, [pk for pk, _ in rows], [text for _, text in rows])
                after = rows[-1][0]
                db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(after), MISSING_FLAG))
            else:
                db.execute("DELETE FROM meta WHERE key = ?", (MISSING_FLAG,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if not rows:
            break
        written += len(rows)
    if written:
        log.info(
            "wrote the word counts of %d rows in %.1f s%s",
            written,
            time.monotonic() - started,
            "; more at the next write" if rows else "",
        )
    return written
