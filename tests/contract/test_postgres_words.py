"""The PostgreSQL word channel over a tenant's word postings (``recalld postgres
word-index``): each row's score from the postings alone, the table read for the best rows
only, and the same list as scoring every matching row on the table, ties across the cut
included."""

from __future__ import annotations

from itertools import permutations

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest

pytestmark = pytest.mark.postgres

WORDS = ("zephyr", "quartz", "lantern", "meadow")


def test_word_postings_score_rows_from_the_postings_and_break_ties_by_id(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 memories hold the same four words in another order (the same BM25 score each),
    beside others holding fewer of them. Asked for fewer than the tied rows, the channel
    over postings returns the rows and scores that scoring every matching row gives (ties
    by id), however many rows it reads from the table first; the rows' tokens are never
    counted on the table for one-word phrases."""
    from recalld.stores.postgres import PostgresStore, queries

    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        for words in permutations(WORDS):
            engine.add(" ".join(words))
        for i in range(30):
            engine.add(f"{WORDS[i % 4]} note number {i} about something else")
        engine.build_index("words")
    store = PostgresStore(pg_database)
    assert store._word_postings
    asks = [CandidateRequest(asks={"bm25": WordsAsk(limit, (w,) if w else WORDS)})
            for limit in (1, 5, 23, 24, 40) for w in ("", "zephyr")]  # fmt: skip
    sql, _ = store._candidates_sql(asks[0])
    assert "word_postings" in sql and "array_positions" not in sql

    def lists() -> list[list[tuple[str, float]]]:
        return [[(c.memory_id, c.score) for c in store.candidates(a)["bm25"]] for a in asks]

    with_postings = lists()
    store._word_postings = False
    exact = lists()
    store._word_postings = True
    assert with_postings == exact
    tied = exact[2]  # the five best of 24 equal scores
    assert len(tied) == 5 and len({s for _, s in tied}) == 1
    for factor, extra in ((0, 0), (1, 0), (1, 3), (4, 100)):
        monkeypatch.setattr(queries, "WORD_READ_FACTOR", factor)
        monkeypatch.setattr(queries, "WORD_READ_EXTRA", extra)
        assert lists() == exact, (factor, extra)
    store.close()
