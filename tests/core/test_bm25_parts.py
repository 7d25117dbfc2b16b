"""SQLite BM25 on a large store: ranked inside FTS5 first, and split into one query per core
over ranges of rows. Each path must return exactly the full join's candidates (ids, order,
scores), filters and ties included; the thresholds are lowered so a small real store takes
every path."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import recalld.threads
from recalld.records import Memory, MemoryFilter
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest, ChannelCandidate
from recalld.stores.sqlite import SQLiteStore, queries as q, readers, word_scores
from recalld.text import content_hash

WORDS = ("kayak", "river", "trip", "club", "meeting", "lisbon", "sister", "dinner", "deploy",
         "bug", "fix", "tea", "garden", "the", "a", "of")  # fmt: skip
QUERIES = (("kayak",), ("lisbon", "sister"), ("the", "river", "bug"), ("absent",), ("tea", "of"))
FILTERS = (MemoryFilter(), MemoryFilter(project="rare"), MemoryFilter(types=("fact",)))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    rng = random.Random(7)
    now = datetime.now(UTC)
    memories = []
    for i in range(3000):
        # Short texts from a small vocabulary: many equal scores, so ties are ordered by id.
        text = " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))
        memories.append(Memory(
            id=f"m{rng.randrange(10**9):09d}-{i}", content=text, content_hash=content_hash(text),
            type="fact" if i % 3 else "event", created_at=now, updated_at=now,
            project="rare" if i % 40 == 0 else None,
        ))  # fmt: skip
    opened = SQLiteStore(Path(tmp_path_factory.mktemp("bm25")) / "s.db")
    opened.insert(memories, None)
    yield opened
    opened.close()


def bm25(store: SQLiteStore, terms: tuple[str, ...], filters: MemoryFilter) -> Any:
    found = store.candidates(CandidateRequest(filters=filters, asks={"bm25": WordsAsk(25, terms)}))
    candidates: list[ChannelCandidate] = found.get("bm25", [])
    return [(c.memory_id, c.rank, c.score) for c in candidates]


def test_every_bm25_path_returns_the_full_joins_candidates(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(word_scores, "MAX_ROWS", 0)  # FTS5's bm25() (test_word_scores.py)
    monkeypatch.setattr(q, "BM25_WINNERS_MIN_ROWS", 10**9)
    cases = [(terms, filters) for terms in QUERIES for filters in FILTERS]
    expected = [bm25(store, terms, filters) for terms, filters in cases]
    assert any(len(e) == 25 for e in expected) and any(e == [] for e in expected)

    monkeypatch.setattr(q, "BM25_WINNERS_MIN_ROWS", 0)
    monkeypatch.setattr(q, "BM25_SPLIT_MIN_ROWS", 10**9)
    assert [bm25(store, terms, filters) for terms, filters in cases] == expected

    threads: set[str] = set()
    spans: list[tuple[int, int] | None] = []
    winners = readers._winners

    def recording(*args: Any) -> Any:
        threads.add(threading.current_thread().name)
        spans.append(args[-1])
        return winners(*args)

    monkeypatch.setattr(readers, "_winners", recording)
    monkeypatch.setattr(q, "BM25_SPLIT_MIN_ROWS", 0)
    monkeypatch.setattr(recalld.threads, "machine_busy", lambda: False)
    for cores in (2, 3, 4, 16):
        monkeypatch.setattr(readers.os, "cpu_count", lambda cores=cores: cores)
        spans.clear()
        assert [bm25(store, terms, filters) for terms, filters in cases] == expected, cores
        assert len(spans) == len(cases) * min(cores, q.BM25_MAX_PARTS)
    assert any(name.startswith("recalld-bm25") for name in threads)

    spans.clear()  # a busy machine: one query, on this thread
    monkeypatch.setattr(recalld.threads, "machine_busy", lambda: True)
    assert [bm25(store, terms, filters) for terms, filters in cases] == expected
    assert spans == [None] * len(cases)


def test_the_row_spans_cover_every_row_once() -> None:
    for rows_max in (1, 2, 3, 10, 999_999, 1_000_000):
        for parts in (2, 3, 4):
            spans = q.bm25_spans(rows_max, parts)
            assert len(spans) == parts
            if rows_max < 100:
                covered = [pk for low, high in spans for pk in range(low, high)]
                assert covered == list(range(1, rows_max + 1))
            assert spans[0][0] == 1 and spans[-1][1] == rows_max + 1
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def _scope(store: SQLiteStore, filters: MemoryFilter) -> readers.Scope:
    where, params = q.filter_sql(filters, ["default"])
    return readers.Scope(lambda: store._db, where, params, ("default",), spread=False)


def _full_join(scope: readers.Scope, terms: tuple[str, ...], limit: int) -> list[Any]:
    sql = q.bm25_sql("memories_fts", scope.where)
    rows = scope.db.execute(sql, [q.fts_match(terms), *scope.params, limit]).fetchall()
    return [(memory_id, float(raw)) for memory_id, raw in rows]


def test_a_small_stores_bm25_reads_only_the_best_matches_and_returns_the_full_join(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the winners-first size, BM25 joins only the best matches with ``memories``
    (ranked inside FTS5) and gives exactly the full join's ids, order and scores: with
    filters that hide rows and with ties at the inner set's edge (short texts of a small
    vocabulary score alike), which take the full join instead."""
    assert store._db.execute("SELECT max(pk) FROM memories").fetchone()[0] < q.BM25_WINNERS_MIN_ROWS
    marked = readers._marked
    paths: list[str] = []

    def watched(*args: Any) -> Any:
        found = marked(*args)
        paths.append("full" if joins else "marked")
        return found

    joins: list[int] = []
    full = readers._full_join
    monkeypatch.setattr(readers, "_marked", watched)
    monkeypatch.setattr(readers, "_full_join", lambda *a: joins.append(1) or full(*a))
    for terms in (*QUERIES, ("kayak", "tea"), ("meeting",), ("dinner", "deploy", "garden")):
        for filters in (*FILTERS, MemoryFilter(types=("event",))):
            scope = _scope(store, filters)
            for limit in (1, 5, 25, 200, 2000):
                joins.clear()
                got = readers.fts5_bm25(scope, "memories_fts", q.fts_match(terms), limit)
                assert got == _full_join(scope, terms, limit), (terms, filters, limit)
    assert "marked" in paths and "full" in paths  # both ways were taken


def test_a_small_stores_bm25_joins_only_the_best_matches(tmp_path: Path) -> None:
    """A word held by 600 rows of distinct lengths (no ties), the best 25 asked: the
    statement run ranks inside FTS5 first and joins only its best rows with ``memories``
    (no full join of the 600), with the full join's answer."""
    now = datetime.now(UTC)
    texts = [" ".join(["harbour", *(f"filler{i}x{j}" for j in range(i))]) for i in range(600)]
    memories = [
        Memory(id=f"m{i:04d}", content=text, content_hash=content_hash(text), type="fact",
               created_at=now, updated_at=now)
        for i, text in enumerate(texts)
    ]  # fmt: skip
    small = SQLiteStore(tmp_path / "s.db")
    try:
        small.insert(memories, None)
        scope = _scope(small, MemoryFilter())
        expected = _full_join(scope, ("harbour",), 25)
        statements: list[str] = []
        small._db.set_trace_callback(statements.append)
        try:
            found = readers.fts5_bm25(scope, "memories_fts", q.fts_match(("harbour",)), 25)
        finally:
            small._db.set_trace_callback(None)
        assert found == expected and [i for i, _ in found] == [f"m{i:04d}" for i in range(25)]
        ranked = [s for s in statements if "memories_fts MATCH" in s]
        assert len(ranked) == 1 and "ORDER BY score LIMIT" in ranked[0], statements
    finally:
        small.close()
