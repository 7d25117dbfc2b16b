"""Each row's token counts (stores/sqlite/word_counts.py): written with the row, dropped with
its text by the schema whoever writes, filled for rows from before them once the word index
serves the store; the word index's winners scored from them get FTS5's scores to the bit,
as from their texts."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.scale.test_word_index import NOW, QUERIES, bm25, corpus, memory

from recalld import lexical
from recalld.stores.sqlite import SQLiteStore, readers, word_counts, word_index

pytest.importorskip("tantivy")


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(word_index, "WORD_INDEX_MIN_ROWS", 100)


def counts_of(path: Path) -> dict[int, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT pk, counts FROM word_counts").fetchall())


def texts_of(path: Path) -> dict[int, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT pk, content FROM memories").fetchall())


def expected(texts: dict[int, str]) -> dict[int, str | None]:
    pks = sorted(texts)
    tokens = lexical.tokenize_many([texts[pk] for pk in pks])
    return {pk: word_counts.encoded(t) for pk, t in zip(pks, tokens, strict=True)}


def test_counts_score_as_fts5_tokenizing_the_texts_to_the_bit() -> None:
    """:func:`word_counts.scores` over each row's counts gives the floats of
    :func:`lexical.bm25_many` over the rows' texts: repeated tokens, folded and stemmed
    words, text that is not ASCII, rows of more than 127 tokens, empty rows, a query that
    repeats a token or holds one no row has."""
    rng = random.Random(14)
    vocabulary = ["new", "york", "run", "running", "runs", "tea", "Café", "cafe", "2023",
                  "東京", "x", "naïve", "the", "of"]  # fmt: skip
    docs = [
        " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 160))) for _ in range(400)
    ]
    tokens = lexical.tokenize_many(docs)
    counted = [word_counts.encoded(t) for t in tokens]
    assert all(c is not None for c in counted)
    assert max(len(t) for t in tokens) > 127
    for terms in (["run", "tea", "run"], ["2023"], ["cafe", "absent", "x"], ["東京", "naive"],
                  ["the", "of", "york", "new"]):  # fmt: skip
        query = lexical.phrases(terms)
        assert word_counts.countable(query)
        hits = [sum(1 for t in tokens if lexical.phrase_hits(t, p)) for p in query]
        rows, total = len(docs) + 1000, sum(len(t) for t in tokens) + 9000
        want = lexical.bm25_many(docs, query, rows, total, hits)
        assert word_counts.scores([c or "" for c in counted], query, hits, rows, total) == want
        assert sum(score > 0 for score in want) >= 50
    assert not word_counts.countable(lexical.phrases(["new york"]))  # a phrase's places
    long = "x" * (lexical.MAX_TOKEN_BYTES + 1)  # kept as its digest, which FTS5 never holds
    assert lexical.phrases([long])[0][0].startswith(lexical.DIGEST_PREFIX)
    assert not word_counts.countable(lexical.phrases([long, "run"]))


def test_the_store_writes_each_rows_counts_and_the_schema_drops_them_with_its_text(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.insert([memory(1, "Running late, runners run"), memory(2, "tea for two"),
                  memory(3, "Café au lait à Paris")], None)  # fmt: skip
    assert counts_of(path) == expected(texts_of(path))
    assert counts_of(path)[1] == "4| run:2 late:1 runner:1 "
    store.replace(memory(2, "coffee, not tea, not now"), None)
    assert counts_of(path) == expected(texts_of(path))
    with sqlite3.connect(path) as other:  # a writer that knows nothing of the counts
        other.execute("UPDATE memories SET content = 'changed elsewhere' WHERE pk = 3")
        other.execute("UPDATE memories SET access_count = 5 WHERE pk = 1")  # text unchanged
    assert sorted(counts_of(path)) == [1, 2]  # the changed row's counts went with its text
    store.forget(["m00001"], hard=True, at=NOW)
    assert sorted(counts_of(path)) == [2]
    store.close()


def test_the_word_index_scores_its_winners_from_counts_as_from_texts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row with counts, none, half: the same rows, order and scores (to the bit);
    with counts the texts are not tokenized."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.insert(corpus(600), None)  # past the threshold: this write builds the index
    assert len(counts_of(path)) == 600
    tokenized: list[list[list[str]]] = []
    batch = lexical.bm25_many

    def counting(texts: list[str], query: list[list[str]], *args: Any) -> list[float]:
        tokenized.append(query)
        return batch(texts, query, *args)

    monkeypatch.setattr(readers.lexical, "bm25_many", counting)
    assert sum(word_counts.countable(lexical.phrases(terms)) for terms in QUERIES) >= 6
    lists = {limit: [bm25(store, terms, limit) for terms in QUERIES] for limit in (1000, 25)}
    assert any(found for found in lists[25])
    # Only the phrase of two tokens ("river trip") read its rows' texts, at each limit.
    assert tokenized == [[["river", "trip"]]] * 2
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM word_counts WHERE pk % 2 = 0")
    assert {limit: [bm25(store, t, limit) for t in QUERIES] for limit in lists} == lists
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM word_counts")
    assert {limit: [bm25(store, t, limit) for t in QUERIES] for limit in lists} == lists
    store.close()


def test_a_store_from_before_the_counts_gets_them_once_the_index_serves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 14 marks a store's rows as lacking counts; each write's follow-up fills
    ``FILL_CHUNKS`` chunks of them, searches score the rest from their texts meanwhile,
    and the mark goes once every row has them."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.insert(corpus(600), None)
    store.close()
    with sqlite3.connect(path) as db:  # as the version before migration 14 left it
        db.executescript(
            "DROP TRIGGER word_counts_au; DROP TRIGGER word_counts_ad; DROP TABLE word_counts;"
            " DELETE FROM migrations WHERE id = 14;"
        )
    store = SQLiteStore(path)  # migrates: every row lacks its counts
    assert counts_of(path) == {}
    want = bm25(store, ("kayak", "river"))  # scored from the texts meanwhile
    assert len(want) > 100
    monkeypatch.setattr(word_counts, "FILL_CHUNK", 100)
    monkeypatch.setattr(word_counts, "FILL_CHUNKS", 4)
    store.insert([memory(7001, "one more kayak trip")], None)  # the follow-up: 400 rows
    assert sorted(counts_of(path)) == [*range(1, 401), 601]  # the new row has its own
    with sqlite3.connect(path) as db:
        flag = (word_counts.MISSING_FLAG,)
        assert db.execute("SELECT value FROM meta WHERE key = ?", flag).fetchone() == ("400",)
    got = bm25(store, ("kayak", "river"))  # part from counts, part from texts
    with monkeypatch.context() as texts_only:
        texts_only.setattr(word_counts, "countable", lambda phrases: False)
        assert got == bm25(store, ("kayak", "river"))
    store.insert([memory(7002, "and another")], None)  # the other 200, then the mark goes
    assert counts_of(path) == expected(texts_of(path))
    assert len(counts_of(path)) == 602
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT 1 FROM meta WHERE key = ?", flag).fetchone() is None
    store.close()
    fresh = SQLiteStore(tmp_path / "fresh.db")  # a new store has nothing to fill
    with sqlite3.connect(tmp_path / "fresh.db") as db:
        assert db.execute("SELECT 1 FROM meta WHERE key = ?", flag).fetchone() is None
    fresh.close()


def test_a_store_without_the_table_is_searched_from_its_texts(tmp_path: Path) -> None:
    """A store of an older schema opened read-only (no migration runs) has no word counts:
    its winners are scored from their texts, the same lists."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.insert(corpus(600), None)
    lists = [bm25(store, terms, 25) for terms in QUERIES]
    with sqlite3.connect(path) as db:  # the schema as a store of version 13 has it
        db.executescript(
            "DROP TRIGGER word_counts_au; DROP TRIGGER word_counts_ad; DROP TABLE word_counts;"
        )
    assert [bm25(store, terms, 25) for terms in QUERIES] == lists
    store.close()
