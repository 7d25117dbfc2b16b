"""An ASCII text's FTS5 tokens from its words (:mod:`recalld.ascii_words`): the tokens FTS5
itself gives, in order, whatever the characters around them."""

from __future__ import annotations

import random
import sqlite3
import string

import pytest

from recalld import ascii_words, lexical

ODD_WORDS = ["a" * 64, "b" * 65, "c" * 3000, "x", "ab", "abc", "caresses", "ponies",
             "generalizations", "2023", "3rd", "v2", "mp3s", "running", "RUNNING",
             "Run"]  # fmt: skip


def fts5_tokens(texts: list[str]) -> list[list[str]]:
    """Each text's tokens as FTS5 itself gives them, one text a row (the reference)."""
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE f USING fts5(c, tokenize='{lexical.FTS5_TOKENIZE}')")
    db.execute("CREATE VIRTUAL TABLE fv USING fts5vocab(f, instance)")
    db.executemany("INSERT INTO f(rowid, c) VALUES (?, ?)", enumerate(texts))
    found: dict[int, dict[int, str]] = {i: {} for i in range(len(texts))}
    for doc, offset, term in db.execute("SELECT doc, offset, term FROM fv"):
        found[doc][offset] = term
    db.close()
    return [[terms[i] for i in sorted(terms)] for terms in found.values()]


def ascii_texts(count: int, seed: int) -> list[str]:
    """Texts of every ASCII character (control characters, punctuation, tabs), mixed case,
    digits and the odd words above."""
    rng = random.Random(seed)
    alphabet = "".join(chr(c) for c in range(128))
    pieces = [*ODD_WORDS, "the", "new", "york", "tea", "runs", "ran", "e-mail", "foo_bar",
              "o'clock", "3.14", "1,000", "#tag", "@user"]  # fmt: skip
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 40)):
            if rng.random() < 0.6:
                parts.append(rng.choice(pieces))
            else:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))))
        texts.append(rng.choice([" ", "  ", "\t", "\n", ",", ""]).join(parts))
    return texts


def test_an_ascii_texts_tokens_are_fts5s() -> None:
    ascii_words.forget()
    texts = [*ascii_texts(400, 1), "", "   ...  !!! ", string.printable, "Run RUN run running"]
    assert all(t.isascii() for t in texts)
    expected = fts5_tokens(texts)
    assert [ascii_words.words(t) is not None for t in texts] == [True] * len(texts)
    assert lexical.tokenize_many(texts) == [[lexical.stored(t) for t in row] for row in expected]
    assert ascii_words._kept  # stems kept for the next texts ...
    assert lexical.tokenize_many(texts[:50]) == lexical.tokenize_many(texts[:50])  # ... reused
    assert max(len(word) for word in ascii_words._kept) <= ascii_words.MAX_KEPT_CHARS
    assert ascii_words.words("café run") is None  # outside ASCII: FTS5 tokenizes it


def test_texts_in_and_outside_ascii_keep_their_places() -> None:
    texts = ["Caroline's café", "runs and RUNS", "東京 tea", "tea", "", "naïve runners"]
    expected = fts5_tokens(texts)
    assert lexical.tokenize_many(texts) == expected


def test_kept_stems_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    ascii_words.forget()
    monkeypatch.setattr(ascii_words, "MAX_KEPT", 50)
    texts = [" ".join(f"word{i}x{j} running" for j in range(7)) for i in range(30)]
    assert lexical.tokenize_many(texts) == fts5_tokens(texts)
    assert 0 < len(ascii_words._kept) <= 50
