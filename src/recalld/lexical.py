"""FTS5's words and BM25, for a backend without FTS5 (PostgreSQL).

The SQLite store ranks words with FTS5's ``bm25()`` over the tokenizer
``porter unicode61 remove_diacritics 2``. To rank alike, the PostgreSQL store stores and
queries the very same tokens and computes the same score. The tokens come from FTS5 itself:
an in-memory FTS5 table (one per thread) tokenizes a batch of texts and ``fts5vocab``
(``instance``) returns every token with its position. That makes them equal to the SQLite
store's by construction (same library, same tokenizer tables, same porter stemmer, tokens
left unstemmed where FTS5's porter leaves them), with no second implementation to drift.

:func:`bm25` is FTS5's formula (``fts5_aux.c``): for each phrase of the query,
``idf = ln((N - n + 0.5) / (n + 0.5))`` (at least ``1e-6``), N the rows of the whole FTS
table, n the rows holding the phrase; ``score += idf * f * (k1 + 1) / (f + k1 * (1 - b +
b * D / avgdl))`` with f the phrase's hits in the row, D the row's token count, avgdl the
mean token count of the whole table, k1 = 1.2, b = 0.75. SQLite returns ``-score``.
PostgreSQL takes N, n and the mean over the namespaces a search may see instead of the whole
table (the same for a store of one tenant; see ``stores/postgres/migrations.m006_tenant_words``).
"""

from __future__ import annotations

import functools
import hashlib
import math
import sqlite3
import threading
from collections.abc import Sequence

from recalld.ascii_words import stems, words
from recalld.text import has_cjk

FTS5_TOKENIZE = "porter unicode61 remove_diacritics 2"
"""The SQLite store's word tokenizer (``memories_fts``)."""
K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6
MAX_TOKEN_BYTES = 2000
"""Longer tokens are stored and queried as a digest (:data:`DIGEST_PREFIX` + sha256 hex):
a PostgreSQL index entry has a size limit, and equality, all the ranking needs, is kept."""
DIGEST_PREFIX = "~"
"""How a long token's digest starts (:func:`stored`): a separator for unicode61, so no real
token starts so."""
BATCH = 500

_local = threading.local()


def _connection() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:")
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(c, tokenize='{FTS5_TOKENIZE}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        _local.conn = conn
    return conn


def stored(token: str) -> str:
    """A token as stored and queried: itself, or its digest when it is too long."""
    if len(token) * 4 <= MAX_TOKEN_BYTES or len(token.encode("utf-8")) <= MAX_TOKEN_BYTES:
        return token
    return DIGEST_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


def tokenize_many(texts: Sequence[str]) -> list[list[str]]:
    """Each text's FTS5 tokens in order (as :func:`stored` gives them): an ASCII text's from
    its words, each stemmed by FTS5 once a process (:mod:`recalld.ascii_words`), any
    other's read back from FTS5 token by token."""
    out: list[list[str] | None] = [None] * len(texts)
    for doc, tokens in _ascii_tokens(texts).items():
        out[doc] = [stored(token) for token in tokens]
    rest = [doc for doc, tokens in enumerate(out) if tokens is None]
    conn = _connection()
    for start in range(0, len(rest), BATCH):
        chunk = rest[start : start + BATCH]
        found: dict[int, dict[int, str]] = {doc: {} for doc in chunk}
        with conn:
            conn.executemany(
                "INSERT INTO t(rowid, c) VALUES (?, ?)", ((doc, texts[doc]) for doc in chunk)
            )
            for doc, offset, term in conn.execute("SELECT doc, offset, term FROM v"):
                found[doc][offset] = term
            conn.execute("DELETE FROM t")
        for doc, terms in found.items():
            out[doc] = [stored(terms[i]) for i in sorted(terms)]
    return [tokens or [] for tokens in out]


def _row_tokens(text: str) -> list[tuple[int, str]]:
    """One text's (offset, token) pairs from FTS5, in order."""
    conn = _connection()
    with conn:
        conn.execute("INSERT INTO t(rowid, c) VALUES (0, ?)", (text,))
        found = conn.execute("SELECT offset, term FROM v ORDER BY offset").fetchall()
        conn.execute("DELETE FROM t")
    return found


def _ascii_tokens(texts: Sequence[str]) -> dict[int, list[str]]:
    """The FTS5 tokens (not yet :func:`stored`) of the ASCII ones of ``texts``, by position
    (none when FTS5 would not stem their words one by one)."""
    split = {doc: found for doc, text in enumerate(texts) if (found := words(text)) is not None}
    if not split:
        return {}
    distinct: set[str] = set()
    for found in split.values():
        distinct.update(found)
    known = stems(distinct, _row_tokens)
    if known is None:
        return {}
    return {doc: [known[word] for word in found] for doc, found in split.items()}


def tokenize(text: str) -> list[str]:
    return tokenize_many([text])[0]


def phrases(terms: Sequence[str]) -> list[list[str]]:
    """The query's phrases as FTS5 reads ``"t1" OR "t2" ...``: each term's tokens, in
    order; a term without tokens is no phrase (it matches nothing)."""
    return [p for p in tokenize_many(list(terms)) if p]


def idf(rows: int, hits: int) -> float:
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return IDF_FLOOR if value <= 0.0 else value


def phrase_hits(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    """How many times ``phrase`` occurs in ``tokens`` (overlaps count, as in FTS5)."""
    k = len(phrase)
    return sum(1 for i in range(len(tokens) - k + 1) if list(tokens[i : i + k]) == list(phrase))


def bm25(
    tokens: Sequence[str],
    query: Sequence[Sequence[str]],
    rows: int,
    total: int,
    hits: Sequence[int],
) -> float:
    """FTS5's BM25 relevance (higher is better) of a row of ``tokens`` for the ``query``
    phrases, in a table of ``rows`` rows and ``total`` tokens where ``hits[i]`` rows hold
    phrase i. The reference the PostgreSQL SQL is tested against."""
    avgdl = total / rows
    score = 0.0
    for phrase, n in zip(query, hits, strict=True):
        f = float(phrase_hits(tokens, phrase))
        score += idf(rows, n) * (f * (K1 + 1.0) / (f + K1 * (1 - B + B * len(tokens) / avgdl)))
    return score


def bm25_many(
    texts: Sequence[str],
    query: Sequence[Sequence[str]],
    rows: int,
    total: int,
    hits: Sequence[int],
) -> list[float]:
    """:func:`bm25` of each of ``texts``, tokenized by FTS5 in one batch: only the query's
    tokens are read back, and each text's length comes from FTS5's own count. The SQLite
    store re-scores its word index's best rows with it (every search: each phrase's idf is
    computed once, and each row's sum is :func:`bm25`'s, phrase by phrase in the query's
    order, so the scores are the same floats).

    A phrase of one token (most are) needs only how often each row holds it: FTS5 counts
    that itself (:data:`_COUNTS`, one row back per row holding it, where listing every
    occurrence cost a row of Python each). A phrase of several tokens reads its tokens'
    occurrences with their offsets: it occurs where its first token does and the rest
    follow in order."""
    conn = _scorer()
    held: dict[tuple[str, ...], dict[int, int]] = {}
    """Each phrase's rows (batch positions) and how often each holds it."""
    with conn:
        conn.executemany("INSERT INTO s(rowid, c) VALUES (?, ?)", enumerate(texts))
        lengths = {doc: first_varint(size) for doc, size in conn.execute(_DOC_SIZES)}
        at: dict[str, set[tuple[int, int]]] = {}
        """Each token of a longer phrase: its (row, offset) occurrences."""
        for phrase, n in zip(query, hits, strict=True):
            key = tuple(phrase)
            if not n or key in held:
                continue
            if len(key) == 1:
                held[key] = dict(conn.execute(_COUNTS, key).fetchall())
                continue
            for token in key:
                if token not in at:
                    at[token] = {(doc, o) for doc, o in conn.execute(_INSTANCES, (token,))}
            counts: dict[int, int] = {}
            for doc, o in at[key[0]]:
                if all((doc, o + i) in at[t] for i, t in enumerate(key) if i):
                    counts[doc] = counts.get(doc, 0) + 1
            held[key] = counts
        conn.execute("INSERT INTO s(s) VALUES ('delete-all')")
    avgdl = total / rows
    scores = [0.0] * len(texts)
    norms: dict[int, float] = {}
    for phrase, n in zip(query, hits, strict=True):
        if not n:
            continue
        weight = idf(rows, n)
        for doc, f in held[tuple(phrase)].items():
            norm = norms.get(doc)
            if norm is None:
                norm = norms[doc] = K1 * (1 - B + B * lengths.get(doc, 0) / avgdl)
            scores[doc] += weight * (f * (K1 + 1.0) / (f + norm))
    return scores


_DOC_SIZES = "SELECT id, sz FROM s_docsize"
_INSTANCES = "SELECT doc, offset FROM sv WHERE term = ?"
_COUNTS = "SELECT doc, count(*) FROM sv WHERE term = ? GROUP BY doc"
"""How often each row holds one token. ``term = ?`` is answered from fts5vocab's index: an
``IN`` list of the query's tokens cost a fifth more."""


def first_varint(blob: bytes) -> int:
    """The first of SQLite's varints in ``blob`` (a one-column FTS5 row's token count: most
    are under 128, one byte)."""
    return blob[0] if blob[0] < 0x80 else varints(blob)[0]


def _scorer() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "scorer", None)
    if conn is None:
        conn = sqlite3.connect(":memory:")
        conn.execute(
            f"CREATE VIRTUAL TABLE s USING fts5(c, tokenize='{FTS5_TOKENIZE}', content='')"
        )
        conn.execute("CREATE VIRTUAL TABLE sv USING fts5vocab(s, instance)")
        _local.scorer = conn
    return conn


def varints(blob: bytes) -> list[int]:
    """SQLite's varints (FTS5's row counts and sizes) read in order."""
    out: list[int] = []
    value = 0
    length = 0
    for byte in blob:
        length += 1
        if length == 9:  # the ninth byte gives all eight bits
            out.append((value << 8) | byte)
            value = length = 0
        elif byte & 0x80:
            value = (value << 7) | (byte & 0x7F)
        else:
            out.append((value << 7) | byte)
            value = length = 0
    return out


@functools.lru_cache(maxsize=1024)
def trigram_terms(query: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A query split for the trigram channel (both backends): the 3-character grams of its
    CJK pieces, and the CJK pieces shorter than 3 characters that only a substring scan can
    find; each without repeats, in order. Cached: a search asks for it more than once."""
    grams: list[str] = []
    short: list[str] = []
    for piece in query.split():
        if not has_cjk(piece):
            continue
        if len(piece) < 3:
            short.append(piece)
        else:
            grams.extend(piece[i : i + 3] for i in range(len(piece) - 2))
    return tuple(dict.fromkeys(grams)), tuple(dict.fromkeys(short))
