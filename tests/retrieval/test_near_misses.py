"""Near misses: the next candidates under the hits, traced in the same pass, each saying why
it lost; asking for them changes nothing about the hits."""

from __future__ import annotations

from dataclasses import replace

import pytest

import recalld
from recalld.requests import SearchQuery, parse
from recalld.retrieval.config import get_preset
from recalld.serialize import to_json

from ..conftest import at

NOTES = [
    "the kestrel deploy runs on Fridays",
    "kestrel staging database lives on db-2",
    "kestrel on-call rotation starts Monday",
    "the kestrel deploy runs on Fridays",  # the same content again, in another session
    "lunch with Ana about the kestrel launch",
    "kestrel backups are kept for 30 days",
]


def test_near_misses_follow_the_hits_with_their_reasons(engine: recalld.MemoryEngine) -> None:
    for i, text in enumerate(NOTES):
        engine.add(text, session_id=f"s{i}", event_time=at(f"2026-03-0{i + 1}"))
    asked = dict(mode="hybrid", as_of=at("2026-04-01"), explain=True)
    plain = engine.search("kestrel deploy", limit=2, **asked)
    result = engine.run_search(SearchQuery(query="kestrel deploy", limit=2,
                                                   near_misses=4, **asked))  # fmt: skip
    assert to_json(result.hits) == to_json(plain.hits)
    assert plain.near_misses == ()
    assert [h.rank for h in result.near_misses] == [3, 4, 5, 6]
    hit_ids = {h.memory.id for h in result.hits}
    assert not hit_ids & {h.memory.id for h in result.near_misses}
    reasons = [h.trace.filters[0] for h in result.near_misses if h.trace]
    assert len(reasons) == 4
    # The copy of the top hit lost as a copy (the ranking put it last: knowledge updates
    # demote the older of two same memories); the others ranked lower.
    copy = [h for h in result.near_misses if h.memory.content == NOTES[0]]
    assert copy and copy[0].trace and "same content" in copy[0].trace.filters[0]
    others = [h for h in result.near_misses if h.memory.content != NOTES[0]]
    assert all(h.trace and h.trace.filters[0].startswith("ranked under the last of the 2 hits")
               for h in others)  # fmt: skip
    scores = [h.score for h in others]
    assert scores == sorted(scores, reverse=True) and max(scores) <= result.hits[-1].score
    # Each trace is a trace like a hit's: channels, fusion and the final score.
    for hit in result.near_misses:
        assert hit.trace and hit.trace.final_score == hit.score and hit.trace.fusion


def test_a_relevance_cut_is_the_reason(engine: recalld.MemoryEngine) -> None:
    for i, text in enumerate(NOTES):
        engine.add(text, session_id=f"s{i}")
    engine.config = replace(get_preset("balanced"), min_score=0.99, dedupe=False)
    result = engine.run_search(SearchQuery(query="kestrel staging database", limit=5,
                                                   mode="hybrid", near_misses=2))  # fmt: skip
    assert result.near_misses
    for hit in result.near_misses:
        assert hit.trace
        reason = hit.trace.filters[0]
        assert reason.startswith("dropped: under the relevance threshold") or (
            "exact lexical" not in reason and reason.startswith("dropped")
        )


def test_near_misses_are_bounded() -> None:
    with pytest.raises(recalld.InvalidInputError, match="near_misses must be between 0 and 100"):
        parse(SearchQuery, {"query": "x", "near_misses": 101})


def test_with_session_granularity_a_sessions_other_memories_lost_to_it(
    engine: recalld.MemoryEngine,
) -> None:
    for text in NOTES[:3]:
        engine.add(text, session_id="same")
    engine.add("kestrel lunch plans", session_id="other")
    result = engine.run_search(
        SearchQuery(
            query="kestrel deploy", limit=1, mode="hybrid", granularity="session", near_misses=3
        )  # fmt: skip
    )
    (hit,) = result.hits
    same = [h for h in result.near_misses if h.memory.session_id == hit.memory.session_id]
    assert same and all(
        h.trace and h.trace.filters[0].startswith("another memory of its session ranked higher")
        for h in same
    )
    assert hit.memory.session_id == "same"
    assert {m.id for m in hit.related} >= {h.memory.id for h in same}


def test_a_factor_that_shows_as_one_held_nothing_down() -> None:
    from recalld.records import Memory
    from recalld.retrieval.adjust import Scored
    from recalld.retrieval.fusion import Fused
    from recalld.retrieval.pipeline import SearchRequest, near_misses

    def item(mid: str, score: float, factors: dict[str, float]) -> Scored:
        when = at("2026-03-01")
        memory = Memory(id=mid, content=mid, type="event", created_at=when, updated_at=when,
                        content_hash=mid)  # fmt: skip
        return Scored(memory, Fused(mid, score), score, factors)

    hit = item("hit", 1.0, {})
    # A day's decay is x0.99998: shown as x1.000, it held nothing down.
    missed = item("missed", 0.5, {"decay": 0.99998, "superseded": 0.5})
    fresh = item("fresh", 0.4, {"decay": 0.99999})
    request = SearchRequest(query="q", limit=1, near_misses=2)
    lost = near_misses([hit, missed, fresh], [hit], {}, request, get_preset("balanced"))
    reasons = {s.memory.id: why for s, why in lost}
    assert reasons["missed"].endswith("held down by superseded x0.500")
    assert "held down" not in reasons["fresh"] and "decay" not in reasons["fresh"]
