"""Every store behaviour on each backend: round trips, filters, forget, dedup, fingerprints,
reindex, source files. The same test, the same expectations, SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

import recalld
from recalld import EmbedderMismatchError, Source
from recalld.providers.embedders import FakeEmbedder

from .conftest import Opener

WHEN = datetime(2025, 3, 14, 9, 30, 15, 123456, tzinfo=UTC)


def test_every_field_round_trips(open_as: Opener) -> None:
    engine = open_as()
    given = dict(
        type="insight", event_time=WHEN, priority=1.5, pinned=True, evergreen=True,
        significance=0.9, project="recalld", scope="work", session_id="s9",
        source=Source("file", "/notes/a.md", 3, 7, "ref-1"), tags=["b", "a"],
        entities=["Lisbon", "ana"], metadata={"role": "user", "n": [1, 2.5, None], "é": "ü"},
        id="m-1", embed_context="the question it answers",
    )  # fmt: skip
    engine.add("Ana moved to Lisbon — 東京 too", **given)
    memory = engine.get("m-1")
    assert (memory.content, memory.type, memory.event_time) == (
        "Ana moved to Lisbon — 東京 too", "insight", WHEN)  # fmt: skip
    assert (memory.priority, memory.pinned, memory.evergreen, memory.significance) == (
        1.5, True, True, 0.9)  # fmt: skip
    assert (memory.project, memory.scope, memory.session_id, memory.source) == (
        "recalld", "work", "s9", Source("file", "/notes/a.md", 3, 7, "ref-1"))  # fmt: skip
    assert memory.tags == ("b", "a") and memory.entities == ("lisbon", "ana")
    assert memory.metadata == {"role": "user", "n": [1, 2.5, None], "é": "ü"}
    assert memory.embed_context == "the question it answers"
    assert (memory.namespace, memory.position, memory.tells_event) == ("default", 0, False)
    assert memory.embedding_fingerprint == FakeEmbedder().fingerprint.to_json()
    assert memory.reference_time == WHEN and memory.forgotten_at is None
    vector = engine.store.vectors_for(["m-1"])["m-1"]
    assert vector.dtype == np.float32 and vector.shape == (64,)
    expected = engine.embedder.embed_documents([memory.embedding_text]).vectors[0]
    assert np.allclose(vector, expected, atol=1e-6)
    # Every dataclass field was compared or is a store-set time.
    assert {f.name for f in dataclasses.fields(memory)} <= set(given) | {
        "content", "created_at", "updated_at", "content_hash", "last_accessed_at",
        "access_count", "valid_until", "superseded_by", "embedding_fingerprint",
        "forgotten_at", "tells_event", "namespace", "position"}  # fmt: skip
    # The decoder sets every field itself (a field it missed would read as its default).
    assert set(vars(memory)) == {f.name for f in dataclasses.fields(memory)}
    assert set(vars(memory.source)) == {f.name for f in dataclasses.fields(Source)}


def test_filters(open_as: Opener) -> None:
    engine = open_as()
    january, february = datetime(2025, 1, 5, tzinfo=UTC), datetime(2025, 2, 5, tzinfo=UTC)
    engine.add("kayak on the river", project="p1", scope="user", tags=["sport", "water"],
               type="event", event_time=january, session_id="a")  # fmt: skip
    engine.add("kayak repair shop", project="p2", scope="team", tags=["sport"],
               type="insight", event_time=february, session_id="b")  # fmt: skip

    def contents(**filters: object) -> set[str]:
        listed = {m.content for m in engine.list(**filters)}
        found = {h.memory.content for h in engine.search("kayak", mode="hybrid", **filters).hits}
        assert found <= listed
        return listed

    assert contents(project="p1") == {"kayak on the river"}
    assert contents(scope="team") == {"kayak repair shop"}
    assert contents(types=["insight"]) == {"kayak repair shop"}
    assert contents(tags=["sport", "water"]) == {"kayak on the river"}
    assert contents(session_id="b") == {"kayak repair shop"}
    assert contents(since=datetime(2025, 2, 1), until=datetime(2025, 3, 1)) == {
        "kayak repair shop"}  # fmt: skip
    assert [m.content for m in engine.list(newest_first=False)] == [
        "kayak on the river", "kayak repair shop"]  # fmt: skip
    assert [m.content for m in engine.list(limit=1, offset=1)] == ["kayak on the river"]


def test_superseded_by_lists_what_a_memory_replaced(open_as: Opener) -> None:
    engine = open_as()
    old = engine.add("the deploy runs on Fridays", id="old").id
    older = engine.add("the deploy runs on Thursdays", id="older").id
    new = engine.add("the deploy runs on Mondays", id="new").id
    engine.add("an unrelated note", id="other")
    engine.supersede(old, by=new)
    engine.supersede(older, by=new)
    engine.forget(older)
    assert {m.id for m in engine.list(superseded_by=new)} == {"old"}
    assert {m.id for m in engine.list(superseded_by=new, include_forgotten=True)} == {
        "old", "older"}  # fmt: skip
    assert engine.list(superseded_by=old) == []
    assert open_as(tenant="eve").list(superseded_by=new) == []  # the tenant wall holds


def test_stats_count_sources_and_days(open_as: Opener) -> None:
    days = iter([datetime(2025, 1, 1, 23, tzinfo=UTC), datetime(2025, 1, 1, 1, tzinfo=UTC),
                 datetime(2025, 1, 3, 12, tzinfo=UTC)])  # fmt: skip
    engine = open_as()
    engine._clock = lambda: next(days)
    engine.add("first")
    engine.add("a chunk", source=Source("file", "/notes/a.md", 1, 2))
    engine.add("third")
    engine._clock = lambda: datetime(2025, 1, 4, tzinfo=UTC)
    engine.forget(engine.list(limit=1)[0].id)
    stats = engine.status().store
    assert stats.by_source == {"direct": 1, "file": 1}  # live memories only
    assert stats.added_by_day == {"2025-01-01": 2, "2025-01-03": 1}  # forgotten ones too
    assert open_as(tenant="eve").status().store.added_by_day == {}


def test_forget_soft_and_hard(open_as: Opener) -> None:
    engine = open_as()
    soft = engine.add("the soft one about kayaks").id
    hard = engine.add("the hard one about kayaks").id
    assert engine.forget(soft) == 1
    assert engine.forget(soft) == 0  # already forgotten: nothing changes
    assert engine.forget(hard, hard=True) == 1
    assert engine.get(soft).forgotten_at is not None
    with pytest.raises(recalld.NotFoundError):
        engine.get(hard)
    assert engine.search("kayaks", mode="hybrid").hits == ()
    assert engine.store.vectors_for([hard]) == {}
    stats = engine.status().store
    assert (stats.memories, stats.forgotten, stats.with_vectors) == (0, 1, 1)
    assert [m.id for m in engine.list(include_forgotten=True)] == [soft]


def test_dedup_and_access(open_as: Opener) -> None:
    engine = open_as()
    first = engine.add("same words", session_id="s")
    again = engine.add("same words", session_id="s")
    other_scope = engine.add("same words", session_id="s", scope="team")
    assert first.created and not again.created and again.duplicate_of == first.id
    assert other_scope.created
    seen = engine.add("a kayak seen once").id
    engine.search("kayak", record_access=True, limit=1)
    assert engine.get(seen).access_count == 1
    assert engine.get(seen).last_accessed_at is not None


def test_fingerprints_and_reindex(open_as: Opener) -> None:
    engine = open_as()
    memory_id = engine.add("a memory to re-embed").id
    other = open_as(embedder=FakeEmbedder(dimension=32, model_id="other"))
    with pytest.raises(EmbedderMismatchError):
        other.search("anything")
    assert other.reindex() == 1
    assert other.store.vectors_for([memory_id])[memory_id].shape == (32,)
    assert other.get(memory_id).embedding_fingerprint == other.embedder.fingerprint.to_json()
    assert [h.memory.id for h in other.search("re-embed", mode="vector").hits] == [memory_id]


def test_session_neighbours_follow_positions(open_as: Opener) -> None:
    engine = open_as()
    ids = [engine.add(f"turn {i} of the chat", session_id="chat").id for i in range(5)]
    engine.add("a turn of another chat", session_id="other")
    assert [engine.get(i).position for i in ids] == [0, 1, 2, 3, 4]
    engine.forget(ids[1])
    found = engine.store.session_neighbors([ids[2]], 2)
    assert found == {ids[2]: [(ids[0], -1), (ids[3], 1), (ids[4], 2)]}


def test_source_files(open_as: Opener, tmp_path: Path) -> None:
    engine = open_as()
    notes = tmp_path / "notes"
    (notes / "memory").mkdir(parents=True)
    (notes / "MEMORY.md").write_text("# Me\n\n- I prefer green tea.\n", encoding="utf-8")
    daily = notes / "memory" / "2026-03-10.md"
    daily.write_text("# 2026-03-10\n\n- Fixed the sync bug with Dana.\n", encoding="utf-8")
    first = engine.index([notes])
    assert len(first.indexed) == 2
    assert engine.index([notes]).indexed == ()
    daily.write_text("# 2026-03-10\n\n- Fixed the export bug with Eve.\n", encoding="utf-8")
    assert [Path(p).name for p in engine.index([notes]).indexed] == ["2026-03-10.md"]
    assert {h.memory.source.path for h in engine.search("export bug Eve", mode="hybrid").hits}
    daily.unlink()
    assert len(engine.index([notes]).removed) == 1
    status = engine.status().sources
    assert status is not None
    assert [m.source.path for m in engine.list(types=["chunk"])] == [str(notes / "MEMORY.md")]


def test_a_store_answers_exactly_the_channels_asked(open_as: Opener) -> None:
    """Each backend answers every ask of a request, matched or not, and no other channel,
    and declares every channel it answers."""
    from recalld.records import TimeRange
    from recalld.retrieval.channels import NAMES
    from recalld.stores.base import (
        CandidateRequest,
        EntitiesAsk,
        NearestAsk,
        RecentAsk,
        TextAsk,
        WordsAsk,
    )

    engine = open_as()
    assert engine.store.channels == NAMES
    engine.add("kayak on the river with Ana 東京タワー", entities=["ana"], event_time=WHEN)
    vector = engine.embedder.embed_query("kayak")
    window = TimeRange(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 12, 1, tzinfo=UTC))
    requests = [
        CandidateRequest(asks={"semantic": NearestAsk(5, vector)}),
        CandidateRequest(
            asks={
                "bm25": WordsAsk(5, ("kayak",)),
                "trigram": TextAsk(5, "kayak 東京タ 東"),
                "substring": TextAsk(5, "kayak 東京タ 東"),
            }
        ),
        CandidateRequest(asks={"bm25": WordsAsk(5, ("absent",))}),
        CandidateRequest(asks={"trigram": TextAsk(5, "東京タワー")}),
        CandidateRequest(
            asks={
                "window_semantic": NearestAsk(5, vector, window=window),
                "entity": EntitiesAsk(5, ("ana",)),
                "temporal": RecentAsk(5, window=window),
            }
        ),
        CandidateRequest(asks={}),
    ]
    expected = [
        ("semantic",), ("bm25", "trigram", "substring"), ("bm25",), ("trigram",),
        ("window_semantic", "entity", "temporal"), (),
    ]  # fmt: skip
    for request, names in zip(requests, expected, strict=True):
        found = engine.store.candidates(request)
        assert set(found) == set(names), request
    assert engine.store.candidates(requests[2])["bm25"] == []


def test_an_ask_with_nothing_to_match_is_answered_empty(open_as: Opener) -> None:
    """An ask the channels would not make (no terms, no CJK pieces, no entities) is still
    answered, empty, on both backends, rather than failing."""
    from recalld.stores.base import CandidateRequest, EntitiesAsk, TextAsk, WordsAsk

    engine = open_as()
    engine.add("kayak on the river with Ana", entities=["ana"])
    asks = {"bm25": WordsAsk(5, ()), "trigram": TextAsk(5, "kayak"),
            "substring": TextAsk(5, ""), "entity": EntitiesAsk(5, ())}  # fmt: skip
    assert engine.store.candidates(CandidateRequest(asks=asks)) == {name: [] for name in asks}
