"""Metric functions against hand-computed cases and an independent reference of the spec."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from recalld.bench.metrics import (
    context_scores,
    dcg,
    evidence_recall,
    locomo_scores,
    longmemeval_scores,
    ndcg,
    ndcg_any,
    percentile,
    recall_all,
    recall_any,
    reciprocal_rank,
    share_found,
    turn_to_session,
    widened_k,
)


def test_dcg_leaves_positions_one_and_two_undiscounted() -> None:
    # upstream: rel[0] + sum(rel[i] / log2(i + 1)) for i >= 1
    assert dcg([1, 0, 1]) == pytest.approx(1 + 1 / math.log2(3))
    assert dcg([0, 1]) == pytest.approx(1.0)
    assert dcg([]) == 0.0


def test_ndcg_hand_computed() -> None:
    # relevant at ranks 2 and 4 of 2 relevant: (1/log2(2) + 1/log2(4)) / (1 + 1/log2(2))
    assert ndcg([False, True, False, True], 2, 4) == pytest.approx(1.5 / 2.0)
    # the upstream formula scores one relevant item at rank 2 as perfect
    assert ndcg([False, True], 1, 2) == pytest.approx(1.0)
    assert ndcg([False, False, True], 1, 3) == pytest.approx(1 / math.log2(3))
    # the cut-off caps the ideal: 5 relevant in the corpus, k = 2
    assert ndcg([True, False], 5, 2) == pytest.approx(1 / 2)
    assert ndcg([True], 0, 1) == 0.0


def test_ndcg_any_on_ids() -> None:
    assert ndcg_any(["x", "g1", "y", "g2"], {"g1", "g2"}, 4) == pytest.approx(0.75)
    assert ndcg_any(["x", "y"], {"g"}, 2) == 0.0


def test_recall_any_all_and_fractional() -> None:
    ranked = ["x", "y", "z"]
    gold = {"y", "w"}
    assert recall_any(ranked, gold, 1) == 0.0
    assert recall_any(ranked, gold, 2) == 1.0
    assert recall_all(ranked, gold, 3) == 0.0
    assert recall_all(ranked, {"x", "z"}, 3) == 1.0
    assert recall_all(ranked, {"x", "z"}, 2) == 0.0
    assert evidence_recall(ranked, gold, 3) == 0.5
    assert evidence_recall(ranked, {"x", "y", "z", "q"}, 2) == 0.5
    assert share_found({"y", "q"}, gold) == 0.5


@pytest.mark.parametrize(
    "metric", [recall_any, recall_all, evidence_recall, ndcg_any, reciprocal_rank]
)
def test_empty_gold_has_no_score(metric) -> None:  # type: ignore[no-untyped-def]
    args = (["a"], set(), 1) if metric is not reciprocal_rank else (["a"], set())
    with pytest.raises(ValueError, match="empty"):
        metric(*args)


def test_widening_rule() -> None:
    sessions = ["a", "a", "b", "a", "c", "d"]
    assert widened_k(sessions, 1) == 1
    assert widened_k(sessions, 2) == 3
    assert widened_k(sessions, 3) == 5
    assert widened_k(sessions, 4) == 6
    # fewer distinct sessions than k: the whole ranking
    assert widened_k(sessions, 5) == 6
    assert widened_k([], 3) == 0


def test_turn_to_session_hand_computed() -> None:
    sessions = ["a", "a", "b", "a", "c", "d"]
    sizes = {"a": 3, "b": 1, "c": 2, "d": 1}
    # k=3 widens to 5 turns: sessions {a, b, c}; c first appears at rank 5
    any3, all3, ndcg3 = turn_to_session(sessions, {"c"}, sizes, 3)
    assert (any3, all3) == (1.0, 1.0)
    # the ideal counts both turns of session c: 1 + 1/log2(2)
    assert ndcg3 == pytest.approx((1 / math.log2(5)) / 2.0)
    # k=2 widens to 3 turns: sessions {a, b}: c is not covered
    assert turn_to_session(sessions, {"c"}, sizes, 2) == (0.0, 0.0, 0.0)
    any_, all_, _ = turn_to_session(sessions, {"b", "d"}, sizes, 3)
    assert (any_, all_) == (1.0, 0.0)
    # every turn of a gold session counts: a at ranks 1, 2 (and 4 beyond k=1's prefix)
    _, _, perfect = turn_to_session(sessions, {"a"}, sizes, 1)
    assert perfect == pytest.approx(1.0)


def test_reciprocal_rank_counts_distinct_sessions() -> None:
    assert reciprocal_rank(["a", "a", "b", "c"], {"c"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(["a", "b"], {"a", "b"}) == 1.0
    assert reciprocal_rank(["a", "b"], {"z"}) == 0.0


def test_percentile_interpolates() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def _upstream_reference(order: list[int], corpus_sessions: list[str], gold: set[str], k: int):
    """The official turn-to-session evaluation, re-derived from its definition.

    ``order`` ranks every corpus index, as upstream's full rankings do.
    """
    effective = k
    while effective <= len(corpus_sessions) and len({corpus_sessions[i] for i in
                                                     order[:effective]}) < k:  # fmt: skip
        effective += 1
    recalled = {corpus_sessions[i] for i in order[:effective]}
    relevances = [1.0 if s in gold else 0.0 for s in corpus_sessions]

    def gain(rels: list[float]) -> float:
        rels = rels[:effective]
        return rels[0] + sum(r / math.log2(i + 1) for i, r in enumerate(rels) if i) if rels else 0

    ideal = gain(sorted(relevances, reverse=True))
    actual = gain([relevances[i] for i in order])
    return (
        float(any(g in recalled for g in gold)),
        float(all(g in recalled for g in gold)),
        0.0 if ideal == 0 else actual / ideal,
    )


@settings(max_examples=200, deadline=None)
@given(
    corpus=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=40),
    data=st.data(),
    k=st.sampled_from([1, 3, 5, 10]),
)
def test_turn_to_session_matches_the_official_definition(corpus, data, k) -> None:  # type: ignore[no-untyped-def]
    order = data.draw(st.permutations(range(len(corpus))))
    gold = data.draw(st.sets(st.sampled_from(sorted(set(corpus))), min_size=1))
    sizes: dict[str, int] = {}
    for session in corpus:
        sizes[session] = sizes.get(session, 0) + 1
    ours = turn_to_session([corpus[i] for i in order], gold, sizes, k)
    assert ours == pytest.approx(_upstream_reference(list(order), corpus, gold, k))


def test_longmemeval_scores_hand_computed() -> None:
    ranked = ["s1t0", "s0t1", "s1t1", "s2t0"]
    session_of = {"s0t0": "A", "s0t1": "A", "s1t0": "B", "s1t1": "B", "s2t0": "C"}
    sizes = {"A": 2, "B": 2, "C": 1}
    scores = longmemeval_scores(ranked, session_of, {"A"}, {"s0t1"}, sizes)
    assert scores["session.recall_any@1"] == 0.0
    assert scores["session.recall_any@3"] == 1.0
    assert scores["session.mrr"] == 0.5
    # k=5 and k=10 widen to the whole ranking (3 sessions only)
    assert scores["session.recall_all@5"] == 1.0
    # session A turn at rank 2 of 4 (widened), ideal = its 2 turns: 1 / (1 + 1)
    assert scores["session.ndcg_any@5"] == pytest.approx(0.5)
    assert scores["turn.recall_all@5"] == 1.0
    assert scores["turn.ndcg_any@5"] == pytest.approx(1.0)  # rank 2 is undiscounted
    assert set(scores) == {
        *(f"session.recall_any@{k}" for k in (1, 3, 5, 10)),
        "session.recall_all@5", "session.recall_all@10", "session.ndcg_any@5",
        "session.ndcg_any@10", "session.ndcg_distinct@5", "session.ndcg_distinct@10", "session.mrr",
        *(f"turn.{m}@{k}" for m in ("recall_all", "ndcg_any") for k in (5, 10, 50)),
    }  # fmt: skip


def test_longmemeval_turn_metrics_need_labels_and_turn_memories() -> None:
    session_of = {"x": "A", "y": "B"}
    without_labels = longmemeval_scores(["x", "y"], session_of, {"A"}, set(), {"A": 1, "B": 1})
    assert not any(k.startswith("turn.") for k in without_labels)
    sessions_only = longmemeval_scores(
        ["x", "y"], session_of, {"A"}, {"x"}, {"A": 1, "B": 1}, turn_level=False
    )
    assert not any(k.startswith("turn.") for k in sessions_only)


def test_locomo_scores_hand_computed() -> None:
    ranked = ["D1:1", "D2:5", "D1:2", "D3:1", "D2:1", "D4:4"]
    session_of = {i: f"session_{i[1]}" for i in ranked}
    scores = locomo_scores(ranked, session_of, {"D2:1", "D3:1", "D9:9"},
                           {"session_2", "session_3", "session_9"})  # fmt: skip
    assert scores["turn.recall_any@1"] == 0.0
    assert scores["turn.recall_any@5"] == 1.0
    assert scores["turn.evidence_recall@5"] == pytest.approx(2 / 3)
    # relevant at ranks 4 and 5, ideal 3 relevant: (1/2 + 1/log2(5)) / (1 + 1 + 1/log2(3))
    expected = (1 / 2 + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
    assert scores["turn.ndcg_any@10"] == pytest.approx(expected)
    assert scores["session.recall_all@10"] == 0.0  # session_9 never appears


def test_context_scores() -> None:
    scores = context_scores({2000: {"a", "b"}, 1000: {"a"}}, {"a", "b"})
    assert scores == {"context.evidence@1000": 0.5, "context.evidence@2000": 1.0}


def test_session_ndcg_distinct_hand_computed() -> None:
    from recalld.bench.metrics import longmemeval_scores

    # Turns ranked: a, b, a, c -> distinct sessions a, b, c; gold {b, c}.
    # DCG (upstream form: position 1 undiscounted, i >= 2 by log2(i)) = 0 + 1/log2(2) + 1/log2(3)
    # ideal = 1 + 1/log2(2) = 2
    scores = longmemeval_scores(
        ["t1", "t2", "t3", "t4"],
        {"t1": "a", "t2": "b", "t3": "a", "t4": "c"},
        {"b", "c"},
        set(),
        {"a": 2, "b": 1, "c": 1},
        turn_level=False,
    )
    expected = (1 + 1 / math.log2(3)) / 2
    assert abs(scores["session.ndcg_distinct@5"] - expected) < 1e-12
