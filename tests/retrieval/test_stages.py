"""Explicit cases for each adjustment, filter and assembly stage."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from recalld.records import Memory, TimeRange
from recalld.retrieval.adjust import (
    QueryContext,
    Scored,
    adjust,
    decay_factor,
    event_factor,
    factors_for,
    identifiers,
    knowledge_updates,
    speaker_factor,
    time_order,
    wanted_role,
)
from recalld.retrieval.assemble import (
    cosine_similarity,
    fit_budget,
    jaccard_similarity,
    mmr,
    session_diverse,
)
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.filters import dedupe, relevance_filter
from recalld.retrieval.fusion import Fused, RankedList
from recalld.retrieval.sessions import apply_session_support, session_support, topic_support
from recalld.stores.base import ChannelCandidate

NOW = datetime(2024, 6, 1, tzinfo=UTC)
BASE = RetrievalConfig()
UNFORGET_TYPES = {"insight": 1.2, "event": 1.0, "raw": 0.5, "turn": 1.0, "chunk": 1.0}
"""Unforget's type boosts (not a default: no net gain on the dev sets)."""


def mem(mid: str, content: str = "", days_old: float = 0.0, **fields: object) -> Memory:
    when = NOW - timedelta(days=days_old)
    return Memory(
        id=mid,
        content=content or f"content of {mid}",
        type=fields.pop("type", "event"),  # type: ignore[arg-type]
        created_at=when,
        updated_at=when,
        content_hash=fields.pop("content_hash", mid),  # type: ignore[arg-type]
        event_time=when,
        **fields,  # type: ignore[arg-type]
    )


def scored(memory: Memory, score: float) -> Scored:
    return Scored(memory, Fused(memory.id, score, {"semantic": score}), score)


# -- adjustments ------------------------------------------------------------------------


def test_hyperbolic_decay_matches_cems_table() -> None:
    cfg = BASE.with_changes(decay="hyperbolic", half_life_days=60)
    assert decay_factor(mem("a", days_old=0), NOW, cfg) == 1.0
    assert abs(decay_factor(mem("a", days_old=30), NOW, cfg) - 2 / 3) < 1e-9
    assert abs(decay_factor(mem("a", days_old=60), NOW, cfg) - 0.5) < 1e-9
    assert abs(decay_factor(mem("a", days_old=120), NOW, cfg) - 1 / 3) < 1e-9


def test_exponential_decay_halves_each_half_life() -> None:
    cfg = BASE.with_changes(decay="exponential", half_life_days=30)
    assert abs(decay_factor(mem("a", days_old=30), NOW, cfg) - 0.5) < 1e-9
    assert abs(decay_factor(mem("a", days_old=90), NOW, cfg) - 0.125) < 1e-9


def test_pinned_and_evergreen_do_not_decay() -> None:
    cfg = BASE.with_changes(decay="exponential", half_life_days=30)
    assert decay_factor(mem("a", days_old=300, pinned=True), NOW, cfg) == 1.0
    assert decay_factor(mem("a", days_old=300, evergreen=True), NOW, cfg) == 1.0


@pytest.mark.parametrize(
    ("memory_project", "factor"), [("org/repo", 2.0), ("other/repo", 0.5), (None, 0.9)]
)
def test_project_boost_and_penalties(memory_project: str | None, factor: float) -> None:
    got = factors_for(mem("a", project=memory_project), QueryContext(NOW, "org/repo"), BASE)
    assert got.get("project", 1.0) == factor


def test_priority_pinned_type_significance_reinforcement() -> None:
    cfg = BASE.with_changes(significance_weight=1.0, reinforcement_weight=0.1,
                            type_boosts=UNFORGET_TYPES)  # fmt: skip
    memory = mem("a", priority=2.0, pinned=True, type="insight", significance=0.9, access_count=3)
    got = factors_for(memory, QueryContext(NOW), cfg)
    assert got["priority"] == 2.0
    assert got["pinned"] == 1.1
    assert got["type"] == 1.2
    assert abs(got["significance"] - 1.4) < 1e-9
    assert abs(got["reinforcement"] - 1.2) < 1e-9
    assert factors_for(mem("b"), QueryContext(NOW), cfg) == {}


def test_raw_memories_rank_below_insights() -> None:
    memories = {"raw": mem("raw", type="raw"), "ins": mem("ins", type="insight")}
    fused = [Fused("raw", 1.0), Fused("ins", 0.5)]
    out = adjust(fused, memories, QueryContext(NOW), BASE.with_changes(type_boosts=UNFORGET_TYPES))
    assert [s.memory.id for s in out] == ["ins", "raw"]  # 0.75 > 0.5
    assert [s.memory.id for s in adjust(fused, memories, QueryContext(NOW), BASE)] == ["raw", "ins"]


def test_role_and_window_factors() -> None:
    cfg = BASE.with_changes(role_boost=1.2, window_boost=1.5, decay="none")
    window = TimeRange(NOW - timedelta(days=10), NOW)
    ctx = QueryContext(NOW, role="user", window=window)
    inside_user = factors_for(mem("a", days_old=2, metadata={"role": "user"}), ctx, cfg)
    outside_assistant = factors_for(mem("b", days_old=20, metadata={"role": "assistant"}), ctx, cfg)
    assert inside_user == {"role": 1.2, "time_window": 1.5}
    assert outside_assistant == {}


def test_memories_that_tell_of_an_event_score_more() -> None:
    cfg = BASE.with_changes(event_boost=1.3)
    told = mem("a", "I visited the Met today", type="turn")
    asked = mem("b", "Which museums open late?", type="turn")
    assert event_factor(told, cfg) == 1.3
    # Only what a person says in a conversation: "we found" in a paper or a note is not
    # something that happened to a speaker.
    assert event_factor(replace(told, type="chunk"), cfg) == 1.0
    assert event_factor(replace(told, type="event", metadata={"role": "user"}), cfg) == 1.3
    assert event_factor(asked, cfg) == 1.0
    assert factors_for(told, QueryContext(NOW), cfg) == {"event_statement": 1.3}
    # The flag a store keeps is what counts; the content is read only when there is none.
    assert event_factor(replace(told, tells_event=False), cfg) == 1.0
    assert event_factor(replace(asked, tells_event=True), cfg) == 1.3
    assert event_factor(told, cfg.with_changes(event_boost=1.0)) == 1.0


def test_memories_that_only_ask_score_less_unless_advice_is_asked_for() -> None:
    asked = mem("q", "Which climbing gyms are open late?", type="turn")
    mine = mem("m", "My gym closes at 9, which ones are open late?", type="turn")
    assert factors_for(asked, QueryContext(NOW), BASE) == {"only_asks": 0.6}
    assert factors_for(replace(asked, type="chunk"), QueryContext(NOW), BASE) == {}
    assert factors_for(mine, QueryContext(NOW), BASE) == {}
    assert factors_for(asked, QueryContext(NOW, advice=True), BASE) == {}
    assert factors_for(asked, QueryContext(NOW), BASE.with_changes(asks_penalty=1.0)) == {}
    # The stored event flag is what decides whether a question also tells of something.
    told = replace(asked, tells_event=True)
    assert factors_for(told, QueryContext(NOW), BASE) == {"event_statement": 1.3}
    with pytest.raises(ValueError, match="asks_penalty"):
        BASE.with_changes(asks_penalty=0.0)


def test_wanted_role() -> None:
    assert wanted_role("what restaurant did you recommend last time?") == "assistant"
    assert wanted_role("can you remind me what you said about the tax deadline") == "assistant"
    assert wanted_role("what restaurant do I like?") == "user"
    # A request for something new is informed by what the user said, not by old answers.
    assert wanted_role("Can you suggest a hotel for my trip to Miami?") == "user"
    assert wanted_role("could you recommend a book for me?") == "user"
    # Not about the asker: in a team's or a coding agent's store the reply is as likely.
    assert wanted_role("how did we fix the deploy?") is None
    assert wanted_role("could you recommend a book?") is None
    assert wanted_role("which book did you recommend?") == "assistant"


def test_newer_statement_of_the_same_thing_wins() -> None:
    old = mem("old", "I lead a team of four engineers", days_old=100)
    new = mem("new", "I lead a team of six engineers", days_old=5)
    other = mem("other", "my cat is called Miso", days_old=1)
    vectors = {
        "old": np.array([1.0, 0.0]),
        "new": np.array([0.96, 0.28]),  # cosine 0.96 with old
        "other": np.array([0.0, 1.0]),
    }
    items = [scored(old, 1.0), scored(new, 0.95), scored(other, 0.5)]
    cfg = BASE.with_changes(kupdate_factor=0.8, kupdate_similarity=0.9)
    out = knowledge_updates(items, vectors, cfg, NOW)
    assert [s.memory.id for s in out] == ["new", "old", "other"]
    assert out[1].factors["superseded"] == 0.8
    assert knowledge_updates(items, vectors, cfg.with_changes(kupdate_factor=1.0), NOW) == items
    # Asked about the past ("in March", "the first time"), the older value may be the answer.
    assert knowledge_updates(items, vectors, cfg, NOW, applies=False) == items
    # A conversation turn that repeats an older one retells it: no update by that alone.
    retold = [scored(replace(old, type="turn"), 1.0), scored(replace(new, type="turn"), 0.95)]
    assert knowledge_updates(retold, vectors, cfg, NOW) == retold


def test_states_value() -> None:
    from recalld.text import states_value

    assert states_value("she now lands on April 14th")
    assert states_value("五月七日から木曜日")
    assert not states_value("you're now helping others, so inspiring")


def test_a_newer_memory_that_says_it_changed_supersedes_a_paraphrase() -> None:
    old = mem("old", "Lessons with Ms. Arakawa are Tuesdays at 10:00", days_old=120)
    new = mem("new", "Arakawa-sensei is changing her timetable: Thursdays at 16:00 instead",
              days_old=20)  # fmt: skip
    same_day = mem("peer", "Ms. Arakawa teaches online", days_old=120)
    vectors = {"old": np.array([1.0, 0.0]), "new": np.array([0.7, 0.714]),  # cosine 0.7
               "peer": np.array([0.7, -0.714])}  # fmt: skip
    items = [scored(old, 1.0), scored(new, 0.8), scored(same_day, 0.4)]
    cfg = BASE.with_changes(kupdate_factor=0.5, kupdate_similarity=0.85,
                            kupdate_change_similarity=0.6)  # fmt: skip
    out = knowledge_updates(items, vectors, cfg, NOW)
    assert [s.memory.id for s in out] == ["new", "old", "peer"]
    assert out[1].factors == {"superseded": 0.5} and "superseded" not in out[2].factors
    # Without a word of change the same cosine is only a related memory.
    calm = replace(new, content="Arakawa-sensei teaches on Thursdays at 16:00")
    items = [scored(old, 1.0), scored(calm, 0.8)]
    assert [s.memory.id for s in knowledge_updates(items, vectors, cfg, NOW)] == ["old", "new"]
    # Nor does a change without the new value: "she is changing things now" names none.
    vague = replace(new, content="Arakawa-sensei is changing things now")
    items = [scored(old, 1.0), scored(vague, 0.8)]
    assert [s.memory.id for s in knowledge_updates(items, vectors, cfg, NOW)] == ["old", "new"]
    # An evergreen note is older than any dated memory, whatever its stored time.
    note = replace(old, evergreen=True, event_time=None, created_at=NOW, updated_at=NOW)
    items = [scored(note, 1.0), scored(new, 0.8)]
    assert [s.memory.id for s in knowledge_updates(items, vectors, cfg, NOW)] == ["new", "old"]


def test_session_support_lifts_sessions_with_several_matches() -> None:
    cfg = BASE.with_changes(session_boost=1.0, session_support=0.5)
    lone = mem("lone", session_id="s1")
    pair = [mem("p1", session_id="s2"), mem("p2", session_id="s2")]
    items = [scored(lone, 1.0), scored(pair[0], 0.9), scored(pair[1], 0.8)]
    support = session_support(items, cfg)
    assert abs(support["s1"] - 1.0) < 1e-9 and abs(support["s2"] - 1.3) < 1e-9
    out = apply_session_support(items, cfg)
    assert out[0].memory.id == "p1"
    assert apply_session_support(items, BASE.with_changes(session_boost=0.0)) == items


def test_a_memory_without_a_session_is_never_worse_off_than_a_lone_turn() -> None:
    note, turn = mem("note"), mem("turn", session_id="s1")
    items = [scored(turn, 0.8), scored(note, 0.8), scored(mem("x", session_id="s2"), 1.0)]
    out = {s.memory.id: s for s in apply_session_support(items, BASE)}
    assert out["note"].score == pytest.approx(out["turn"].score) and out["note"].score > 0.8


def test_topic_support_ranks_sessions_by_their_closest_turns() -> None:
    # "lone" has the single closest turn; "pair" has two close ones and wins on the mean.
    lone = [mem("l1", session_id="lone"), mem("l2", session_id="lone")]
    pair = [mem("p1", session_id="pair"), mem("p2", session_id="pair")]
    loose = mem("x", session_id=None)
    items = [scored(lone[0], 1.0), scored(loose, 0.9), scored(pair[0], 0.8),
             scored(pair[1], 0.7), scored(lone[1], 0.1)]  # fmt: skip
    cosines = {"l1": 0.60, "l2": 0.10, "p1": 0.50, "p2": 0.45, "x": 0.70}
    out = topic_support(items, cosines, BASE.with_changes(topic_weight=1.0, topic_turns=2))
    by_id = {s.memory.id: s for s in out}
    assert by_id["p1"].factors["topic_support"] == 2.0  # first session: x(1 + 1/1)
    assert by_id["l1"].factors["topic_support"] == 1.5  # second: x(1 + 1/2)
    assert by_id["p1"].score == pytest.approx(1.6) and by_id["l1"].score == pytest.approx(1.5)
    # A memory without a session is a session of its own: mean (0.70 + 0) / 2, third.
    assert by_id["x"].factors["topic_support"] == pytest.approx(1 + 1 / 3)
    # A session named "" is still a session, and a memory without one does not join it.
    blank = topic_support([scored(mem("b", session_id=""), 0.5), scored(loose, 0.9)],
                          {"b": 0.8, "x": 0.7}, BASE)  # fmt: skip
    assert {s.memory.id: s.factors.get("topic_support") for s in blank} == {"b": 2.0, "x": 1.5}
    assert [s.memory.id for s in out][:2] == ["p1", "l1"]
    # With one turn a session, the single closest turn decides instead: x (0.70), then l1.
    one = {s.memory.id: s for s in topic_support(items, cosines, BASE.with_changes(topic_turns=1))}
    assert one["x"].factors["topic_support"] == 2.0 and one["l1"].factors["topic_support"] == 1.5


def test_topic_support_leaves_sessions_the_semantic_channel_missed() -> None:
    found, missed = mem("a", session_id="s1"), mem("b", session_id="s2")
    items = [scored(missed, 1.0), scored(found, 0.4)]
    out = topic_support(items, {"a": 0.5}, BASE)
    assert [(s.memory.id, s.score) for s in out] == [("b", 1.0), ("a", 0.4 * 2.0)]
    assert "topic_support" not in out[0].factors
    assert topic_support(items, {}, BASE) == items
    assert topic_support(items, {"a": 0.5}, BASE.with_changes(topic_weight=0.0)) == items


# -- filters ----------------------------------------------------------------------------


def test_threshold_never_drops_exact_lexical_hits() -> None:
    items = [scored(mem("a"), 1.0), scored(mem("b"), 0.2), scored(mem("c"), 0.1)]
    lists = [RankedList("bm25", [ChannelCandidate("c", 1, 0.9)])]
    kept, reasons = relevance_filter(items, lists, BASE.with_changes(min_score=0.5))
    assert [s.memory.id for s in kept] == ["a", "c"]
    assert "protected" in reasons["c"]


def test_score_gap_cut() -> None:
    items = [scored(mem("a"), 1.0), scored(mem("b"), 0.9), scored(mem("c"), 0.2),
             scored(mem("d"), 0.19)]  # fmt: skip
    kept, _ = relevance_filter(items, [], BASE.with_changes(max_gap=0.5))
    assert [s.memory.id for s in kept] == ["a", "b"]


def test_dedupe_keeps_best_copy_and_is_idempotent() -> None:
    items = [scored(mem("a", content_hash="h1"), 1.0), scored(mem("b", content_hash="h1"), 0.9),
             scored(mem("c", content_hash="h2"), 0.5)]  # fmt: skip
    once, folded = dedupe(items)
    assert [s.memory.id for s in once] == ["a", "c"] and folded == 1
    assert dedupe(once) == (once, 0)


# -- assembly ---------------------------------------------------------------------------


def test_fit_budget_keeps_trying_smaller_items() -> None:
    assert fit_budget([5, 8, 3, 2], lambda x: x, 10) == [5, 3, 2]


def test_mmr_prefers_diverse_items() -> None:
    a = scored(mem("a", "python backend deploy pipeline"), 1.0)
    b = scored(mem("b", "python backend deploy pipeline again"), 0.95)
    c = scored(mem("c", "sister visiting lisbon in april"), 0.8)
    chosen = mmr([a, b, c], jaccard_similarity(), lam=0.5, k=2)
    assert [s.memory.id for s in chosen] == ["a", "c"]
    assert [s.memory.id for s in mmr([a, b, c], jaccard_similarity(), 1.0, 2)] == ["a", "b"]


def test_cosine_similarity_uses_vectors() -> None:
    sim = cosine_similarity({"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])})
    assert sim(scored(mem("a"), 1), scored(mem("b"), 1)) == 0.0
    assert sim(scored(mem("a"), 1), scored(mem("x"), 1)) == 0.0


def test_session_diverse_takes_each_session_first() -> None:
    items = [
        scored(mem("a1", session_id="A"), 1.0),
        scored(mem("a2", session_id="A"), 0.9),
        scored(mem("b1", session_id="B"), 0.5),
        scored(mem("c1", session_id="C"), 0.4),
    ]
    chosen = session_diverse(items, jaccard_similarity(), lam=1.0, k=4)
    assert [s.memory.id for s in chosen] == ["a1", "b1", "c1", "a2"]


def test_config_is_frozen_and_validated() -> None:
    with pytest.raises(AttributeError):
        BASE.fusion.rrf_k = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        BASE.fusion = BASE.fusion  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown retrieval setting"):
        BASE.with_changes(nope=1)
    with pytest.raises(ValueError, match="fusion"):
        replace(BASE, fusion="max")
    with pytest.raises(ValueError, match="topic_turns"):
        BASE.with_changes(topic_turns=0)
    with pytest.raises(ValueError, match="kupdate_follow"):
        BASE.with_changes(kupdate_follow=-1)


def test_neighbor_support_lifts_and_adds_adjacent_turns() -> None:
    from recalld.retrieval.sessions import neighbor_support

    question = mem("q", "Gina: got any fave dance styles?", session_id="s")
    answer = mem("a", "Jon: contemporary is my top pick", session_id="s")
    far = mem("far", "Jon: unrelated", session_id="s")
    items = [scored(question, 1.0), scored(far, 0.3)]
    neighbors = {"q": [("a", 1), ("x", -2)], "far": [("a", -1)]}
    cfg = BASE.with_changes(neighbor_weight=0.5)
    other = mem("x", "Gina: hi", session_id="s")
    out = neighbor_support(items, neighbors, lambda ids: {"a": answer, "x": other}, cfg)
    by_id = {s.memory.id: s for s in out}
    assert abs(by_id["a"].score - 0.5) < 1e-9  # the best lender wins, not the sum
    assert by_id["a"].fused.contributions == {"neighbor_of:q": 0.5}
    assert abs(by_id["x"].score - 0.25) < 1e-9  # two steps away: halved
    assert [s.memory.id for s in out][:2] == ["q", "a"]
    unchanged = neighbor_support(
        items, neighbors, lambda ids: {}, BASE.with_changes(neighbor_weight=0.0)
    )
    assert [s.score for s in unchanged] == [1.0, 0.3]


def test_store_session_neighbors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import recalld
    from recalld.config import Settings
    from recalld.providers.embedders import FakeEmbedder
    from recalld.records import NewMemory

    settings = Settings(db=tmp_path / "m.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.add_many(
            [
                NewMemory(content=f"turn {i} of {s}", session_id=s, id=f"{s}{i}")
                for s in ("A", "B")
                for i in range(4)
            ]  # fmt: skip
        )
        engine.forget("A2")
        got = engine.store.session_neighbors(["A1", "B0"], 1)
    assert got == {"A1": [("A0", -1), ("A3", 1)], "B0": [("B1", 1)]}


def test_plain_config_turns_every_adjustment_off() -> None:
    plain = BASE.with_changes(decay="hyperbolic", mmr_lambda=0.5).plain()
    memory = mem("a", days_old=300, priority=2.0, pinned=True, type="insight",
                 metadata={"role": "user"}, access_count=9)  # fmt: skip
    assert factors_for(memory, QueryContext(NOW, "p", "user"), plain) == {}
    sessions, statements = plain.sessions, plain.statements
    assert sessions.session_boost == sessions.neighbor_weight == sessions.topic_weight == 0.0
    assert statements.asks_penalty == statements.event_boost == 1.0
    assert plain.assembly.mmr_lambda == 1.0
    assert plain.candidates == BASE.candidates and plain.fusion.rrf_k == BASE.fusion.rrf_k


# -- earliest / latest ordering ---------------------------------------------------------


def test_time_order_lifts_the_requested_end_of_time() -> None:
    cfg = BASE.with_changes(order_weight=0.2)
    old, mid, new = mem("old", days_old=300), mem("mid", days_old=100), mem("new", days_old=1)
    items = [scored(new, 1.0), scored(mid, 0.95), scored(old, 0.9)]
    earliest = time_order(items, "earliest", cfg)
    assert [s.memory.id for s in earliest] == ["old", "mid", "new"]
    assert earliest[0].factors["order_earliest"] == pytest.approx(1.2)
    assert earliest[1].factors["order_earliest"] == pytest.approx(1.1)
    assert "order_earliest" not in earliest[2].factors  # the newest gains nothing
    latest = time_order(list(reversed(items)), "latest", cfg)
    assert [s.memory.id for s in latest] == ["new", "mid", "old"]


def test_time_order_off_or_without_an_order_changes_nothing() -> None:
    items = [scored(mem("a", days_old=1), 1.0), scored(mem("b", days_old=9), 0.5)]
    assert time_order(items, None, BASE.with_changes(order_weight=0.5)) == items
    assert time_order(items, "earliest", BASE.with_changes(order_weight=0.0)) == items


def test_time_order_leaves_deeper_candidates_alone() -> None:
    cfg = BASE.with_changes(order_weight=0.5, order_depth=2)
    items = [scored(mem("a", days_old=1), 1.0), scored(mem("b", days_old=9), 0.9),
             scored(mem("c", days_old=99), 0.1)]  # fmt: skip
    out = time_order(items, "earliest", cfg)
    assert [s.memory.id for s in out] == ["b", "a", "c"]
    assert out[2] == items[2]


# -- speakers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "factor"),
    [
        ({"speaker": "Melanie"}, 1.3),
        ({"speaker": "Caroline"}, 1.0),
        ({"role": "Melanie"}, 1.3),  # transcripts imported with a name as the role
        ({"role": "user"}, 1.0),  # a generic role names nobody
        ({"speaker": "Mary Ann"}, 1.3),  # named by the first name
        ({"speaker": "Ann Mary"}, 1.0),  # a later word of the name alone is not enough
        ({"role": "Yusuf Demir (Corvel Retail)"}, 1.3),  # named by the organisation
        ({"role": "Dana (Corvel Bank)"}, 1.0),  # every word of the organisation is needed
        ({}, 1.0),
    ],
)
def test_speaker_named_in_the_query_is_preferred(metadata: dict[str, str], factor: float) -> None:
    cfg = BASE.with_changes(speaker_boost=1.3)
    query = frozenset({"where", "has", "melanie", "camped", "mary", "corvel", "retail"})
    assert speaker_factor(mem("a", metadata=metadata), query, cfg) == factor


def test_speaker_boost_off_by_setting() -> None:
    memory = mem("a", metadata={"speaker": "Melanie"})
    off = BASE.with_changes(speaker_boost=1.0)
    assert speaker_factor(memory, frozenset({"melanie"}), off) == 1.0


def test_turns_do_not_decay_unless_asked() -> None:
    cfg = BASE.with_changes(decay="exponential", half_life_days=365.0)
    turn = mem("t", days_old=365, type="turn")
    note = mem("n", days_old=365, type="chunk")
    assert "decay" not in factors_for(turn, QueryContext(NOW), cfg)
    assert factors_for(note, QueryContext(NOW), cfg)["decay"] == pytest.approx(0.5)
    assert factors_for(turn, QueryContext(NOW), cfg.with_changes(decay_turns=True))[
        "decay"
    ] == pytest.approx(0.5)


def test_a_question_in_the_past_tense_asks_what_happened() -> None:
    from recalld.retrieval.pipeline import asks_past

    assert asks_past("When did Caroline go to the support group?")
    assert asks_past("what was the plan for the offsite")
    assert not asks_past("when is my qualifying exam?")
    assert not asks_past("which Python version is the ingest repo pinned to?")


def test_a_newer_memory_that_replaces_a_top_hit_joins_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from recalld.records import MemoryFilter
    from recalld.retrieval.updates import follow_updates
    from recalld.stores import open_store

    old = mem("old", "My sister Ana is visiting on April 12th", days_old=40)
    moved = mem("moved", "Ana's flight got moved, she now lands on April 14th", days_old=10)
    calm = mem("calm", "Ana likes the tram in Lisbon", days_old=5)  # no word of change
    earlier = mem("earlier", "Ana's visit got moved to April", days_old=60)  # older: not newer
    other = mem("other", "The boiler was serviced", days_old=1)
    vectors = {
        "old": [1.0, 0.0, 0.0],
        "moved": [0.8, 0.6, 0.0],  # cosine 0.8 with old
        "calm": [0.8, 0.0, 0.6],
        "earlier": [0.8, -0.6, 0.0],
        "other": [0.0, 0.0, 1.0],
    }
    store = open_store(tmp_path / "m.db")
    try:
        store.insert([old, moved, calm, earlier, other], np.array(list(vectors.values())))
        items = [scored(old, 1.0), scored(other, 0.5)]
        found = {"old": np.array(vectors["old"]), "other": np.array(vectors["other"])}
        cfg = BASE.with_changes(kupdate_follow=2, kupdate_change_similarity=0.5)
        # "when does my sister Ana arrive?": "moved" names Ana, a word of the query
        aside: dict[str, str] = {}
        out = follow_updates(items, found, store, MemoryFilter(), cfg, {}, terms=("ana",),
                             aside=aside)  # fmt: skip
        by_id = {s.memory.id: s for s in out}
        assert set(by_id) == {"old", "other", "moved"}  # calm and earlier do not replace it
        assert by_id["moved"].score == 1.0 and by_id["moved"].fused.contributions == {
            "update_of:old": 1.0}  # fmt: skip
        assert "moved" in found  # its vector is there for the knowledge-update stage
        assert [s.memory.id for s in knowledge_updates(out, found, cfg, NOW)][0] == "moved"
        # Off, or filtered out of the request (another project), it changes nothing.
        off = cfg.with_changes(kupdate_follow=0)
        assert follow_updates(items, dict(found), store, MemoryFilter(), off, {}) == items
        elsewhere = MemoryFilter(project="elsewhere")
        assert follow_updates(items, dict(found), store, elsewhere, cfg, {}) == items
        # A memory with no evidence of its own for the query is not lifted to a hit's score.
        assert follow_updates(items, dict(found), store, MemoryFilter(), cfg, {},
                              terms=("boiler",), aside=aside) == items  # fmt: skip
        assert aside["update_follow"].startswith("1 pair of alike candidates left as they are")
        assert "no evidence of its own for the query" in aside["update_follow"]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("what flavour is the cake on order CC-1043?", ("cc-1043",)),
        ("which I2C address is the BME280 sensor on?", ("i2c", "bme280")),
        ("Was ist mit dem Ticket INC0048213 passiert?", ("inc0048213",)),
        ("MissingOutputException dada2_filter", ("dada2_filter",)),
        ("my 40th birthday at 3pm after the 10k", ()),  # ordinals, times, counts
        ("what did Halvorsen 2021 find?", ()),  # a year is a time, not an identifier
    ],
)
def test_identifiers_in_a_query(query: str, found: tuple[str, ...]) -> None:
    assert identifiers(query) == found


def test_an_identifier_lifts_its_memories_and_their_thread() -> None:
    named = mem("a", content="Booked as order CC-1043: chocolate fudge", session_id="t-1043")
    reply = mem("b", content="Switched to lemon drizzle, same Saturday", session_id="t-1043")
    other = mem("c", content="Order CC-10430 and CC-1187 arrived", session_id="t-1187")
    loose = mem("d", content="our cakes: chocolate, lemon, carrot")
    memories = {m.id: m for m in (named, reply, other, loose)}
    fused = [Fused(m.id, 1.0, {}) for m in (loose, other, reply, named)]
    ctx = QueryContext(NOW, identifiers=identifiers("the cake on order CC-1043?"))
    scored = {s.memory.id: s for s in adjust(fused, memories, ctx, BASE)}
    assert scored["a"].factors["identifier"] == scored["b"].factors["identifier"] == 2.0
    assert "identifier" not in scored["c"].factors and "identifier" not in scored["d"].factors
    off = adjust(fused, memories, ctx, BASE.with_changes(identifier_boost=1.0))
    assert all("identifier" not in s.factors for s in off)
