"""Each mechanism applies only where its premise holds: the embedder's own score scale,
rare identifiers, sessions that exist, and a ranking that does not depend on ``limit``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder, EmbeddingBatch, FakeEmbedder, Fingerprint
from recalld.records import Memory
from recalld.retrieval.adjust import Scored, identified_threads, knowledge_updates
from recalld.retrieval.calibration import UNCALIBRATED, Calibration, calibrate
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused, RankedList
from recalld.retrieval.pipeline import trust_words
from recalld.retrieval.sessions import apply_session_support, neighbor_support, topic_support
from recalld.stores.base import ChannelCandidate

NOW = datetime(2026, 6, 1, tzinfo=UTC)
BASE = RetrievalConfig()


class CrowdedEmbedder(Embedder):
    """The fake embedder's vectors pulled towards one shared direction, as models whose
    unrelated texts score 0.75-0.85 (multilingual-e5) place every text."""

    def __init__(self, pull: float = 1.6) -> None:
        self.inner = FakeEmbedder(dimension=64, model_id="crowded")
        self.pull = pull
        self.common = np.zeros(64, dtype=np.float32)
        self.common[0] = 1.0

    @property
    def fingerprint(self) -> Fingerprint:
        return self.inner.fingerprint

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        batch = self.inner.embed_batch(texts, is_query=is_query)
        moved = batch.vectors + self.pull * self.common
        moved /= np.linalg.norm(moved, axis=1, keepdims=True)
        return EmbeddingBatch(moved.astype(np.float32), batch.windows)


def mem(mid: str, content: str, days_old: float = 0.0, **fields: object) -> Memory:
    when = NOW - timedelta(days=days_old)
    return Memory(id=mid, content=content, type=fields.pop("type", "event"),  # type: ignore[arg-type]
                  created_at=when, updated_at=when, content_hash=mid, event_time=when,
                  **fields)  # type: ignore[arg-type]  # fmt: skip


def scored(memory: Memory, score: float) -> Scored:
    return Scored(memory, Fused(memory.id, score, {"semantic": score}), score)


# -- calibration ------------------------------------------------------------------------


def test_calibration_puts_chance_at_zero_and_identity_at_one() -> None:
    crowded = calibrate(CrowdedEmbedder())
    plain = calibrate(FakeEmbedder(dimension=64))
    assert crowded.chance > 0.6 > plain.chance  # the crowded model's unrelated texts score high
    for c in (crowded, plain):
        assert c.lift(c.chance) == pytest.approx(0.0)
        assert c.lift(1.0) == pytest.approx(1.0)
        assert c.query_lift(c.query_chance) == pytest.approx(0.0)
    assert calibrate(CrowdedEmbedder()) is crowded  # measured once per fingerprint


def test_unrelated_facts_do_not_supersede_each_other_on_a_crowded_scale() -> None:
    model = CrowdedEmbedder()
    texts = ["The cat sleeps on the red sofa all afternoon.",
             "Quarterly tax filing moved to 30 June; the new fee is 120 euros now."]  # fmt: skip
    vectors = model.embed_documents(texts).vectors
    raw_cosine = float(vectors[0] @ vectors[1])
    assert (
        raw_cosine > BASE.updates.kupdate_change_similarity
    )  # a bare cosine would call them one subject
    old, new = (
        mem("old", texts[0], days_old=10, type="insight"),
        mem("new", texts[1], type="insight"),
    )
    items = [scored(old, 1.0), scored(new, 0.9)]
    found = {"old": vectors[0], "new": vectors[1]}
    bare = knowledge_updates(items, found, BASE, NOW, True, {}, UNCALIBRATED)
    assert (
        bare[0].memory.id == "new"
        and bare[1].factors.get("superseded") == BASE.updates.kupdate_factor
    )
    fitted = knowledge_updates(items, found, BASE, NOW, True, {}, calibrate(model))
    assert [s.memory.id for s in fitted] == ["old", "new"]
    assert all("superseded" not in s.factors for s in fitted)


def test_a_restatement_still_supersedes_on_a_crowded_scale() -> None:
    model = CrowdedEmbedder()
    calibration = calibrate(model)
    vector = model.embed_documents(["Standup is at 9:30 in room B."]).vectors[0]
    old = mem("old", "Standup is at 9:30 in room B.", days_old=5, type="insight")
    new = mem("new", "Standup is at 9:30 in room B!", type="insight")
    out = knowledge_updates([scored(old, 1.0), scored(new, 0.9)], {"old": vector, "new": vector},
                            BASE, NOW, True, {}, calibration)  # fmt: skip
    assert out[0].memory.id == "new" and out[1].factors["superseded"] == BASE.updates.kupdate_factor


def test_calibration_is_a_plain_affine_map() -> None:
    c = Calibration(chance=0.8, query_chance=0.5)
    assert c.lift(0.9) == pytest.approx(0.5) and c.query_lift(0.75) == pytest.approx(0.5)


# -- identifiers ------------------------------------------------------------------------


def test_a_rare_identifier_lifts_its_thread_fully_and_a_common_one_barely() -> None:
    memories = [mem("t1", "Order CC-1043 is delayed", session_id="s1"),
                mem("t2", "switched to lemon drizzle", session_id="s1")]  # fmt: skip
    memories += [mem(f"g{i}", f"BRCA1 variant study number {i}") for i in range(20)]
    rare = identified_threads(memories, ("cc-1043",), 2.0)
    assert rare == {"s1": 2.0}
    common = identified_threads(memories, ("brca1",), 2.0)
    assert len(common) == 20 and all(f == pytest.approx(1.05) for f in common.values())
    both = identified_threads(memories, ("brca1", "cc-1043"), 2.0)
    assert both["s1"] == 2.0 and both["memory:g0"] == pytest.approx(1.05)


# -- sessions ---------------------------------------------------------------------------


def test_session_stages_stand_aside_where_no_candidate_has_a_session() -> None:
    docs = [scored(mem(f"d{i}", f"abstract {i}"), 1.0 - i / 10) for i in range(4)]
    assert apply_session_support(docs, BASE) == docs
    assert topic_support(docs, {"d3": 0.9, "d0": 0.1}, BASE) == docs


def test_the_reply_to_a_users_report_gains_when_the_query_is_not_about_the_user() -> None:
    report = mem("r", "the deploy fails with a psycopg import error", session_id="s",
                 metadata={"role": "user"})  # fmt: skip
    answer = mem("a", "pin psycopg to 3.2 and rebuild the image", session_id="s",
                 metadata={"role": "assistant"})  # fmt: skip
    other = mem("o", "unrelated", session_id="t", metadata={"role": "assistant"})
    items = [scored(report, 1.0), scored(other, 0.5), scored(answer, 0.3)]
    neighbors = {"r": [("a", 1)]}
    config = BASE.with_changes(reply_weight=0.8, neighbor_weight=0.0)

    def load(ids: list[str]) -> dict[str, Memory]:
        return {}

    lifted = {s.memory.id: s.score for s in neighbor_support(items, neighbors, load, config)}
    assert lifted["a"] == pytest.approx(0.3 + 0.8)
    about_user = neighbor_support(items, neighbors, load, config, role="user")
    assert {s.memory.id: s.score for s in about_user}["a"] == pytest.approx(0.3)
    off = neighbor_support(items, neighbors, load,
                           BASE.with_changes(neighbor_weight=0.0, reply_weight=0.0))  # fmt: skip
    assert {s.memory.id: s.score for s in off}["a"] == pytest.approx(0.3)


# -- channel trust ----------------------------------------------------------------------


def candidates(scores: list[float], prefix: str) -> list[ChannelCandidate]:
    return [ChannelCandidate(f"{prefix}{i}", i + 1, s) for i, s in enumerate(scores)]


def test_a_clear_bm25_winner_weighs_more_and_a_close_race_does_not() -> None:
    config = BASE.with_changes(strong_signal_weight=2.0)
    clear = [RankedList("semantic", candidates([0.5, 0.4], "v"), 2.0),
             RankedList("bm25", candidates([0.9, 0.6], "w"), 2.0)]  # fmt: skip
    lists, signal = trust_words(clear, config)
    assert signal == {"top": 0.9, "gap": pytest.approx(0.3)}
    assert [r.weight for r in lists] == [2.0, 4.0]
    close = [clear[0], RankedList("bm25", candidates([0.9, 0.85], "w"), 2.0)]
    assert trust_words(close, config) == (close, None)
    assert trust_words(clear, BASE.with_changes(strong_signal_weight=1.0)) == (clear, None)


# -- limit ------------------------------------------------------------------------------


def test_the_top_k_is_the_first_k_of_any_larger_search(
    tmp_path: Path, local_embedder: Embedder
) -> None:
    settings = Settings.model_construct(db=tmp_path / "m.db", cache_dir=tmp_path / "cache")
    topics = ["deploy", "billing", "sister", "garden", "flight", "tests", "bakery", "thesis"]
    items = [f"note {i} about the {topics[i % 8]}: detail {i * 7 % 13} and more on {topics[i % 5]}"
             for i in range(240)]  # fmt: skip
    with recalld.open(settings=settings, embedder=local_embedder) as engine:
        engine.add_many(items)
        for query in ("how did the deploy go?", "when does my sister arrive?", "bakery orders"):
            full = [h.memory.id for h in engine.search(query, limit=50).hits]
            for limit in (1, 5, 10, 20):
                top = [h.memory.id for h in engine.search(query, limit=limit).hits]
                assert top == full[:limit], (query, limit)


# -- dates ------------------------------------------------------------------------------


@contextmanager
def one_import(
    tmp_path: Path, embedder: Embedder, docs: list[str]
) -> Iterator[tuple[recalld.MemoryEngine, list[str]]]:
    """A store of documents added in one call (one moment, no event times), and their ids."""
    settings = Settings.model_construct(db=tmp_path / "docs.db", cache_dir=tmp_path / "cache")
    with recalld.open(settings=settings, embedder=embedder) as engine:
        yield engine, [r.id for r in engine.add_many(docs)]


def test_a_year_no_memory_is_dated_in_is_searched_as_a_word(
    tmp_path: Path, local_embedder: Embedder
) -> None:
    docs = [
        "Pneumonia cases in young children worldwide were estimated at 30 million in 2010.",
        "Pneumonia in young children: estimates of worldwide cases and deaths by region.",
        "Childhood pneumonia vaccines reduced hospital admissions in several countries.",
    ]
    query = "How many pneumonia cases in young children worldwide in 2010?"
    with one_import(tmp_path, local_embedder, docs) as (engine, ids):
        result = engine.search(query, limit=3, as_of=NOW)
        assert "time_window" in result.details["stood_aside"]
        assert result.details["time_window"] is None
        # A small store scores every vector: nothing for vector completion to repair.
        assert "every vector was scored" in result.details["stood_aside"]["vector_completion"]
        assert result.hits[0].memory.id == ids[0]
        # Memories dated inside the year keep the window, and the trace says nothing.
        dated = engine.add("Pneumonia ward notes from the winter.",
                           event_time=datetime(2010, 2, 1, tzinfo=UTC))  # fmt: skip
        kept = engine.search(query, limit=3, as_of=NOW)
        assert "time_window" not in kept.details["stood_aside"]
        assert kept.details["time_window"] is not None and dated.id


def test_an_event_in_a_store_of_undated_documents_is_a_subject_not_a_time(
    tmp_path: Path, local_embedder: Embedder
) -> None:
    docs = [
        "BMP4 added to stem cells induces MSX2 expression within three hours.",
        "MSX2 homeobox genes in craniofacial development of the mouse.",
        "Growth factor signalling in early embryos: a review.",
    ]
    query = "MSX2 is induced 3 hours after the addition of BMP4"
    anchored = BASE.with_changes(anchor_events=True)
    with one_import(tmp_path, local_embedder, docs) as (engine, ids):
        result = engine.search(query, limit=3, as_of=NOW, config=anchored)
        assert result.details["anchor"] is None and result.details["time_window"] is None
        assert "anchor_event" in result.details["stood_aside"]
        assert result.hits[0].memory.id == ids[0]


def test_memories_of_one_moment_never_supersede_each_other() -> None:
    # Two abstracts stored in one import: the same time, so neither is the newer version.
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    a = mem("a", "Drug X now lowers blood pressure by 12 mmHg in trials.", type="event")
    b = mem("b", "Drug X lowers blood pressure by 10 mmHg in trials.", type="event")
    out = knowledge_updates([scored(a, 1.0), scored(b, 0.9)], {"a": vector, "b": vector},
                            BASE, NOW, True, {}, UNCALIBRATED)  # fmt: skip
    assert [(s.memory.id, s.score) for s in out] == [("a", 1.0), ("b", 0.9)]
    later = mem("c", "Drug X now lowers blood pressure by 12 mmHg in trials.", days_old=-1)
    out = knowledge_updates([scored(b, 1.0), scored(later, 0.9)], {"b": vector, "c": vector},
                            BASE, NOW, True, {}, UNCALIBRATED)  # fmt: skip
    assert out[0].memory.id == "c" and out[1].factors["superseded"] == BASE.updates.kupdate_factor


def test_reply_lending_stands_aside_where_the_query_language_gives_no_cue() -> None:
    from recalld.retrieval.adjust import role_readable

    assert role_readable("how did we fix the deploy?")
    assert not role_readable("先週の土曜日に何をしましたか？")
    assert not role_readable("Was war letzten Samstag im Nachtdienst los?")
