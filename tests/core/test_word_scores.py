"""The small store's word channel summed from FTS5's index (stores/sqlite/word_scores.py):
the same ids, order and scores (to the bit) as FTS5's full join for every query, with
filters, ties, stems, long rows, rewritten and deleted rows; the rows' token counts kept
between searches only while the store is unchanged."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from recalld.records import Memory, MemoryFilter
from recalld.stores.sqlite import SQLiteStore, queries as q, readers, word_scores
from recalld.text import content_hash

WORDS = ("kayak", "kayaking", "kayaks", "river", "rivers", "trip", "club", "meeting", "meet",
         "lisbon", "sister", "dinner", "deploy", "deployed", "bug", "fix", "tea", "garden",
         "the", "a", "of", "café", "cafe", "naïve", "x")  # fmt: skip
TERMS = (*WORDS, "absent", "Kayaking", "RIVERS", "!!!", "e-mail", "don't", "kayak river",
         "the the", "river of the", "mail")  # fmt: skip


def _memory(i: int, text: str, now: datetime, rng: random.Random) -> Memory:
    return Memory(
        id=f"m{rng.randrange(10**6):06d}-{i}", content=text, content_hash=content_hash(text),
        type="fact" if i % 3 else "event", created_at=now, updated_at=now,
        project="rare" if i % 17 == 0 else None,
    )  # fmt: skip


def _text(rng: random.Random) -> str:
    # Mostly short texts of a small vocabulary (many equal scores: ties by id); some over
    # 127 tokens (a two-byte size in FTS5's docsize); some holding "e-mail".
    count = rng.choice((1, 2, 3, 5, 8, 140, 300)) if rng.random() < 0.1 else rng.randint(1, 7)
    words = rng.choices(WORDS, k=count)
    if rng.random() < 0.05:
        words.append("e-mail")
    return " ".join(words)


@pytest.fixture(autouse=True)
def _summed_at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stores here are small: the summed path is taken below its usual floor."""
    monkeypatch.setattr(word_scores, "MIN_ROWS", 0)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    rng = random.Random(11)
    now = datetime.now(UTC)
    opened = SQLiteStore(Path(tmp_path_factory.mktemp("words")) / "s.db")
    opened.insert([_memory(i, _text(rng), now, rng) for i in range(2500)], None)
    # Rows rewritten and deleted: FTS5's index then holds delete markers to merge past.
    db = opened._db
    for pk in rng.sample(range(1, 2501), 200):
        db.execute("UPDATE memories SET content = ? WHERE pk = ?", (_text(rng), pk))
    for pk in rng.sample(range(1, 2501), 100):
        db.execute("DELETE FROM memories WHERE pk = ?", (pk,))
    db.execute("UPDATE memories SET forgotten_at = 1.0 WHERE pk % 29 = 0")
    yield opened
    opened.close()


def _scope(store: SQLiteStore, filters: MemoryFilter, lengths: Any = None) -> readers.Scope:
    where, params = q.filter_sql(filters, ["default"])
    return readers.Scope(
        lambda: store._db, where, params, ("default",), spread=False, lengths=lengths
    )


def _full_join(scope: readers.Scope, terms: tuple[str, ...], limit: int) -> list[Any]:
    sql = q.bm25_sql("memories_fts", scope.where)
    rows = scope.db.execute(sql, [q.fts_match(terms), *scope.params, limit]).fetchall()
    return [(memory_id, float(raw)) for memory_id, raw in rows]


def test_random_queries_get_the_full_joins_ids_order_and_scores(store: SQLiteStore) -> None:
    rng = random.Random(5)
    lengths = word_scores.Lengths()
    taken = 0
    for _ in range(60):
        terms = tuple(rng.choices(TERMS, k=rng.randint(1, 6)))
        filters = rng.choice((MemoryFilter(), MemoryFilter(project="rare"),
                              MemoryFilter(types=("event",))))  # fmt: skip
        for limit in (1, 7, 25, 200, 5000):
            for kept in (lengths, None):
                scope = _scope(store, filters, kept)
                expected = _full_join(scope, terms, limit)
                assert readers.FTS5.top(scope, terms, limit) == expected, (terms, filters, limit)
                found = word_scores.best(store._db, kept, scope.where, scope.params, terms, limit)
                assert found is None or found == expected
                taken += found is not None
    assert taken == 60 * 5 * 2  # every query takes the summed path
    scope = _scope(store, MemoryFilter())
    for phrase in (("e-mail",), ("kayak river", "tea"), ("the the",), ("of a the",)):
        expected = _full_join(scope, phrase, 40)
        assert word_scores.best(store._db, None, scope.where, scope.params, phrase, 40) == expected
    assert _full_join(scope, ("e-mail",), 40) and _full_join(scope, ("kayak river",), 40)
    assert word_scores.best(store._db, None, "1", [], ("!!!",), 5) == []
    long_token = "k" * 2100  # stored as a digest (lexical.MAX_TOKEN_BYTES): not this path
    assert word_scores.best(store._db, None, "1", [], (long_token,), 5) is None
    assert readers.FTS5.top(scope, (long_token, "tea"), 5) == _full_join(
        scope, (long_token, "tea"), 5
    )


def test_a_warm_search_leaves_fts5_scoring_no_row(store: SQLiteStore) -> None:
    """FTS5's bm25() looks up each match's size with a statement of its own; the summed
    path, its counts kept, runs no such lookup and no bm25()."""
    scope = _scope(store, MemoryFilter(), word_scores.Lengths())
    terms = ("kayak", "the", "garden")
    readers.FTS5.top(scope, terms, 200)  # reads the rows' sizes
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    try:
        found = readers.FTS5.top(scope, terms, 200)
    finally:
        store._db.set_trace_callback(None)
    assert found == _full_join(scope, terms, 200)
    assert not [s for s in statements if "docsize" in s or "bm25(" in s], statements


def _search(store: SQLiteStore, terms: tuple[str, ...]) -> list[Any]:
    from recalld.stores.asks import WordsAsk
    from recalld.stores.base import CandidateRequest

    found = store.candidates(CandidateRequest(filters=MemoryFilter(),
                                              asks={"bm25": WordsAsk(50, terms)}))  # fmt: skip
    return [(c.memory_id, c.score) for c in found["bm25"]]


def _reference(store: SQLiteStore, terms: tuple[str, ...]) -> list[Any]:
    return [(i, -raw) for i, raw in _full_join(_scope(store, MemoryFilter()), terms, 50)]


def test_an_empty_store_has_no_match(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        assert _search(store, ("kayak",)) == []
    finally:
        store.close()


def test_kept_sizes_follow_every_write(tmp_path: Path) -> None:
    """A row's new length is used after a write through the same handle, another handle
    (another connection: ``data_version``) and a rolled-back transaction."""
    rng = random.Random(3)
    now = datetime.now(UTC)
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    other = SQLiteStore(path)
    try:
        store.insert([_memory(i, _text(rng), now, rng) for i in range(300)], None)
        terms = ("kayak", "river", "tea")
        assert _search(store, terms) == _reference(store, terms)
        top = _search(store, terms)[0][0]
        (pk,) = store._db.execute("SELECT pk FROM memories WHERE id = ?", (top,)).fetchone()

        # The top row made much longer through this handle's own connection: it drops.
        store._db.execute(
            "UPDATE memories SET content = content || ? WHERE pk = ?", (" filler" * 80, pk)
        )
        assert _search(store, terms) == _reference(store, terms)
        assert _search(store, terms)[0][0] != top

        # Made short again through another connection (another handle, same file).
        other._db.execute("UPDATE memories SET content = 'kayak river tea' WHERE pk = ?", (pk,))
        assert _search(store, terms) == _reference(store, terms)
        assert _search(store, terms)[0][0] == top

        # Inside a caller's transaction that is then rolled back: nothing of it is kept.
        db = store._db
        db.execute("BEGIN")
        db.execute("UPDATE memories SET content = 'kayak' || ? WHERE pk = ?", (" x" * 90, pk))
        assert _search(store, terms) == _reference(store, terms)
        db.execute("ROLLBACK")
        assert _search(store, terms) == _reference(store, terms)
        assert _search(store, terms)[0][0] == top

        # A raw connection deleting and adding rows (pks reused).
        raw = sqlite3.connect(path)
        raw.execute("DELETE FROM memories WHERE pk = (SELECT max(pk) FROM memories)")
        raw.commit()
        raw.close()
        store.insert([_memory(999, "kayak kayak river", now, rng)], None)
        assert _search(store, terms) == _reference(store, terms)

        # Every row deleted, then one added back.
        store._db.execute("DELETE FROM memories")
        assert _search(store, terms) == [] == _reference(store, terms)
        store.insert([_memory(1000, "tea tea", now, rng)], None)
        assert _search(store, terms) == _reference(store, terms) != []
    finally:
        other.close()
        store.close()


def test_counts_of_a_closed_connection_are_not_kept(tmp_path: Path) -> None:
    """The store closes a thread's connection when the thread ends: the counts read through
    it go when the next connection's are kept, not when the store closes."""
    rng = random.Random(5)
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        store.insert([_memory(i, _text(rng), datetime.now(UTC), rng) for i in range(50)], None)
        lengths = word_scores.Lengths()
        first, second = sqlite3.connect(path), sqlite3.connect(path)
        for db in (first, second):
            db.execute("BEGIN")
            assert word_scores._best(db, lengths.known(db), "1", [], [["kayak"]], 5, (50, 500))
            db.execute("COMMIT")
        first.close()
        third = sqlite3.connect(path)
        lengths.known(third)
        assert set(lengths._kept._by_connection) == {second, third}
        second.close()
        third.close()
    finally:
        store.close()
