"""Events a query is placed relative to ("before I moved to Lisbon"): found by a small search
with the real packaged model, on a real SQLite store, and turned into the time window."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder
from recalld.records import NewMemory, TimeRange
from recalld.retrieval.config import get_preset

MOVED = datetime(2024, 3, 1, tzinfo=UTC)
ANCHORED = get_preset("balanced").with_changes(anchor_events=True)
"""Anchors are off by default (no net gain measured on the dev sets); these tests turn
them on."""
MEMORIES = [
    ("moved", "I finally moved to Lisbon, the boxes are everywhere.", MOVED),
    ("porto", "My flat in Porto has a view of the Douro river.", datetime(2023, 5, 2, tzinfo=UTC)),
    ("alfama", "My new flat in Alfama is tiny but bright.", datetime(2024, 4, 9, tzinfo=UTC)),
    ("cat", "The cat knocked a plant off the shelf again.", datetime(2024, 2, 1, tzinfo=UTC)),
]


@pytest.fixture
def engine(tmp_path: Path, local_embedder: Embedder):  # type: ignore[no-untyped-def]
    settings = Settings(db=tmp_path / "m.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=local_embedder) as engine:
        engine.add_many(
            [NewMemory(content=c, id=i, type="event", event_time=t) for i, c, t in MEMORIES]
        )
        yield engine


def test_before_an_event_becomes_the_window_before_its_time(engine: recalld.MemoryEngine) -> None:
    result = engine.search("where did I live before I moved to Lisbon?", limit=4, explain=True,
                           as_of=datetime(2024, 6, 1, tzinfo=UTC), config=ANCHORED)  # fmt: skip
    assert result.details["time_window"] == TimeRange(None, MOVED)
    temporal = {h.memory.id for h in result.hits if "temporal" in (h.trace.fusion if h.trace
                                                                     else {})}  # fmt: skip
    # The temporal channel holds only what happened before the move.
    assert temporal and temporal <= {"porto", "cat"}
    assert result.details["anchor"] == {
        "relation": "before",
        "event": "I moved to Lisbon",
        "dated_by": "moved",
    }


def test_the_event_words_do_not_search_for_the_event_itself(engine: recalld.MemoryEngine) -> None:
    as_of = datetime(2024, 6, 1, tzinfo=UTC)
    anchored = engine.search("where did I live before I moved to Lisbon?", explain=True,
                             as_of=as_of, config=ANCHORED)  # fmt: skip
    plain = engine.search("where did I live before I moved to Lisbon?", explain=True,
                          as_of=as_of, config=get_preset("balanced").with_changes(
                              anchor_events=False))  # fmt: skip
    # Without the anchor, "moved" and "lisbon" are BM25 terms and find the move itself;
    # with it, they only date the window and BM25 searches for the rest ("live").
    assert any("bm25" in (h.trace.fusion if h.trace else {}) for h in plain.hits
               if h.memory.id == "moved")  # fmt: skip
    assert not any("bm25" in (h.trace.fusion if h.trace else {}) for h in anchored.hits
                   if h.memory.id == "moved")  # fmt: skip


def test_an_unknown_event_gives_no_window(engine: recalld.MemoryEngine) -> None:
    result = engine.search("what did I eat before the quantum chromodynamics lecture?", limit=4,
                           config=ANCHORED)  # fmt: skip
    assert result.details["time_window"] is None


def test_a_named_time_wins_over_an_event(engine: recalld.MemoryEngine) -> None:
    as_of = datetime(2024, 6, 1, tzinfo=UTC)
    result = engine.search("where did I live in May 2023, before I moved to Lisbon?", as_of=as_of,
                           config=ANCHORED)  # fmt: skip
    window = result.details["time_window"]
    assert window == TimeRange(datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC))


def test_anchor_events_are_off_by_default(engine: recalld.MemoryEngine) -> None:
    result = engine.search("where did I live before I moved to Lisbon?")
    assert result.details["time_window"] is None and result.details["anchor"] is None
