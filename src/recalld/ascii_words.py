"""FTS5's tokens of ASCII text without tokenizing each text in FTS5 (:mod:`recalld.lexical`).

FTS5's ``porter unicode61 remove_diacritics 2`` splits a text, turns each piece into a token
and stems each token alone. On ASCII text the split is plain: unicode61 keeps letters and
digits (ASCII has no other letter, number or private-use character) and separates at every
other character, and folds A-Z to a-z. So the tokens of an ASCII text are its runs of
``[a-z0-9]`` (once lowered), each stemmed, in order, and its token count is the number of
runs. The stem of each distinct word is still FTS5's own: words not seen before are
tokenized by FTS5 together, one word a token, and kept (:data:`MAX_KEPT` at most), so a
process stems each word of its vocabulary once. Text with any other character goes to FTS5
whole, as before.

Why: reading a text's every token back through ``fts5vocab`` costs a row of Python a
token. On 260 texts of the scale corpus (40 words each), 88 µs a text through FTS5
against 25 from the words, the same tokens. Every memory written to PostgreSQL is
tokenized so (its word rows), as is every row the SQLite store's word index takes in
(its build at 50k rows and more, and each catch-up).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

WORD = re.compile(r"[a-z0-9]+")
"""A token of lowered ASCII text, as unicode61 splits it."""
MAX_KEPT = 200_000
"""Stems kept at most (a dict of short strings, about 30 MB when full); past it they are
forgotten and found again by FTS5 as needed."""
MAX_KEPT_CHARS = 64
"""Longer words are stemmed each time, not kept (FTS5's porter leaves them as they are, and
a text of long random words must not fill the memory)."""

_kept: dict[str, str] = {}


def words(text: str) -> list[str] | None:
    """The lowered words of ``text`` as unicode61 splits them, or None when the text holds a
    character outside ASCII (FTS5 splits it then)."""
    if not text.isascii():
        return None
    return WORD.findall(text.lower())


def stems(
    found: Iterable[str], row_tokens: Callable[[str], list[tuple[int, str]]]
) -> dict[str, str] | None:
    """FTS5's token for each of the words ``found`` (a word alone, as it stems within any
    text), read from those kept and, for the rest, from one FTS5 row of them all
    (``row_tokens``: a text's (offset, token) pairs, in order, from FTS5); None if FTS5 did
    not give one token a word (then the caller tokenizes its texts in FTS5)."""
    out: dict[str, str] = {}
    missing: list[str] = []
    for word in found:
        stem = _kept.get(word)
        if stem is None:
            missing.append(word)
        else:
            out[word] = stem
    if not missing:
        return out
    made = _stem(missing, row_tokens)
    if made is None:
        return None
    if len(_kept) + len(made) > MAX_KEPT:
        _kept.clear()
    for word, stem in zip(missing, made, strict=True):
        out[word] = stem
        if len(word) <= MAX_KEPT_CHARS and len(_kept) < MAX_KEPT:
            _kept[word] = stem
    return out


def _stem(
    missing: Sequence[str], row_tokens: Callable[[str], list[tuple[int, str]]]
) -> list[str] | None:
    tokens = row_tokens(" ".join(missing))
    if [offset for offset, _ in tokens] != list(range(len(missing))):
        return None
    return [term for _, term in tokens]


def forget() -> None:
    """Drop the kept stems (tests)."""
    _kept.clear()
