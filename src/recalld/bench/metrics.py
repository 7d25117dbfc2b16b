"""Retrieval metrics as pure functions over ranked ids and gold sets.

The definitions follow LongMemEval's official evaluation (``src/retrieval/eval_utils.py``):

* ``recall_any@k``: 1 if any gold item is in the top k, else 0;
* ``recall_all@k``: 1 if every gold item is in the top k, else 0;
* ``ndcg_any@k``: NDCG with binary relevance, where the DCG discounts position ``i``
  (1-based) by ``log2(i)`` for ``i >= 2`` and leaves position 1 undiscounted, and the ideal
  ranking puts every relevant item of the corpus first;
* a turn ranking scored at session level widens k until the top k turns cover k distinct
  sessions (or the ranking runs out), and scores the widened prefix with session labels.

``session.ndcg_distinct@k`` is reported beside the official ``session.ndcg_any@k``: the NDCG
of the distinct sessions in order of first appearance against the gold sessions (ideal:
``min(len(gold), k)`` at the top), the form most published session-level figures take.

Gold sets must not be empty: a question without labels has no score (callers skip it),
rather than the upstream ``all([]) == 1`` convention.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

LME_SESSION_ANY_K = (1, 3, 5, 10)
LME_SESSION_ALL_K = (5, 10)
LME_SESSION_NDCG_K = (5, 10)
LME_TURN_K = (5, 10, 50)
"""The LongMemEval cut-offs the issue asks for (turn level: where ``has_answer`` exists)."""
LOCOMO_TURN_ANY_K = (1, 5, 10)
LOCOMO_EVIDENCE_K = (5, 10)
LOCOMO_TURN_NDCG_K = (10,)
LOCOMO_SESSION_ALL_K = (5, 10)
BEIR_NDCG_K = (10,)
BEIR_RECALL_K = (100,)
BEIR_MRR_K = (10,)
"""BEIR's headline cut-offs: nDCG@10 (its leaderboard), recall@100 and MRR@10."""


def _check(gold: Collection[str]) -> None:
    if not gold:
        raise ValueError("the gold set is empty: this question has no score for this metric")


def recall_any(ranked: Sequence[str], gold: Collection[str], k: int) -> float:
    """1.0 if any gold id is among the first ``k`` ranked ids."""
    _check(gold)
    top = set(ranked[:k])
    return float(any(g in top for g in gold))


def recall_all(ranked: Sequence[str], gold: Collection[str], k: int) -> float:
    """1.0 if every gold id is among the first ``k`` ranked ids."""
    _check(gold)
    top = set(ranked[:k])
    return float(all(g in top for g in gold))


def evidence_recall(ranked: Sequence[str], gold: Collection[str], k: int) -> float:
    """The share of the gold ids found among the first ``k`` ranked ids."""
    _check(gold)
    top = set(ranked[:k])
    return sum(g in top for g in set(gold)) / len(set(gold))


def share_found(found: Collection[str], gold: Collection[str]) -> float:
    """The share of the gold ids present in ``found`` (e.g. the memories of a context)."""
    _check(gold)
    return sum(g in found for g in set(gold)) / len(set(gold))


def dcg(relevances: Sequence[float]) -> float:
    """Upstream's DCG: position 1 undiscounted, position ``i >= 2`` divided by ``log2(i)``."""
    return sum(rel if i == 0 else rel / math.log2(i + 1) for i, rel in enumerate(relevances))


def ndcg(relevant: Sequence[bool], total_relevant: int, k: int) -> float:
    """NDCG@k of a ranking given as relevance flags, top first.

    Args:
        relevant: whether each ranked item is relevant.
        total_relevant: how many relevant items the whole corpus holds (the ideal ranking
            puts ``min(total_relevant, k)`` of them first).
        k: the cut-off.
    """
    ideal = dcg([1.0] * min(total_relevant, k))
    if ideal == 0:
        return 0.0
    return dcg([1.0 if r else 0.0 for r in relevant[:k]]) / ideal


def ndcg_any(ranked: Sequence[str], gold: Collection[str], k: int) -> float:
    """NDCG@k with binary relevance for a ranking of distinct ids."""
    _check(gold)
    wanted = set(gold)
    return ndcg([r in wanted for r in ranked], len(wanted), k)


def widened_k(ranked_sessions: Sequence[str], k: int) -> int:
    """The official widening: the smallest prefix of a turn ranking covering ``k`` sessions.

    Returns ``len(ranked_sessions)`` when the ranking covers fewer than ``k`` sessions.
    """
    seen: set[str] = set()
    for position, session in enumerate(ranked_sessions, start=1):
        seen.add(session)
        if len(seen) >= k:
            return position
    return len(ranked_sessions)


def turn_to_session(
    ranked_sessions: Sequence[str],
    gold_sessions: Collection[str],
    session_sizes: Mapping[str, int],
    k: int,
) -> tuple[float, float, float]:
    """``(recall_any, recall_all, ndcg_any)`` at session level from a turn ranking.

    Args:
        ranked_sessions: the session of each ranked turn, top first (repeats expected).
        gold_sessions: the gold session ids.
        session_sizes: how many turns each session has in the corpus; the ideal DCG counts
            every turn of a gold session as relevant, as upstream does.
        k: the number of distinct sessions to cover.
    """
    _check(gold_sessions)
    wanted = set(gold_sessions)
    effective = widened_k(ranked_sessions, k)
    top = set(ranked_sessions[:effective])
    relevant_total = sum(session_sizes.get(s, 0) for s in wanted)
    return (
        float(any(s in top for s in wanted)),
        float(all(s in top for s in wanted)),
        ndcg([s in wanted for s in ranked_sessions], relevant_total, effective),
    )


def distinct(items: Sequence[str]) -> list[str]:
    """Items in first-seen order without repeats."""
    return list(dict.fromkeys(items))


def reciprocal_rank(ranked: Sequence[str], gold: Collection[str]) -> float:
    """1 / (1-based position of the first gold id among the distinct ranked ids); 0 if none."""
    _check(gold)
    for position, item in enumerate(distinct(ranked), start=1):
        if item in gold:
            return 1.0 / position
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between order statistics."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def longmemeval_scores(
    ranked_ids: Sequence[str],
    session_of: Mapping[str, str],
    gold_sessions: Collection[str],
    gold_turns: Collection[str],
    session_sizes: Mapping[str, int],
    *,
    turn_level: bool = True,
) -> dict[str, float]:
    """Every LongMemEval metric of one question, keyed ``session.*`` and ``turn.*``.

    Turn metrics exist only with ``turn_level`` (memories are turns) and non-empty
    ``gold_turns`` (``has_answer`` marks).
    """
    sessions = [session_of[i] for i in ranked_ids]
    scores: dict[str, float] = {}
    for k in sorted({*LME_SESSION_ANY_K, *LME_SESSION_ALL_K, *LME_SESSION_NDCG_K}):
        any_k, all_k, ndcg_k = turn_to_session(sessions, gold_sessions, session_sizes, k)
        if k in LME_SESSION_ANY_K:
            scores[f"session.recall_any@{k}"] = any_k
        if k in LME_SESSION_ALL_K:
            scores[f"session.recall_all@{k}"] = all_k
        if k in LME_SESSION_NDCG_K:
            scores[f"session.ndcg_any@{k}"] = ndcg_k
            # The same ranking as distinct sessions (first appearance), ideal = the gold
            # sessions: the definition most published session-level NDCG figures use.
            scores[f"session.ndcg_distinct@{k}"] = ndcg_any(distinct(sessions), gold_sessions, k)
    scores["session.mrr"] = reciprocal_rank(sessions, gold_sessions)
    if turn_level and gold_turns:
        for k in LME_TURN_K:
            scores[f"turn.recall_all@{k}"] = recall_all(ranked_ids, gold_turns, k)
            scores[f"turn.ndcg_any@{k}"] = ndcg_any(ranked_ids, gold_turns, k)
    return scores


def locomo_scores(
    ranked_ids: Sequence[str],
    session_of: Mapping[str, str],
    gold_turns: Collection[str],
    gold_sessions: Collection[str],
) -> dict[str, float]:
    """Every LoCoMo metric of one question (its evidence turns must not be empty)."""
    scores: dict[str, float] = {}
    for k in LOCOMO_TURN_ANY_K:
        scores[f"turn.recall_any@{k}"] = recall_any(ranked_ids, gold_turns, k)
    for k in LOCOMO_EVIDENCE_K:
        scores[f"turn.evidence_recall@{k}"] = evidence_recall(ranked_ids, gold_turns, k)
    for k in LOCOMO_TURN_NDCG_K:
        scores[f"turn.ndcg_any@{k}"] = ndcg_any(ranked_ids, gold_turns, k)
    sessions = [session_of[i] for i in ranked_ids]
    for k in LOCOMO_SESSION_ALL_K:
        effective = widened_k(sessions, k)
        scores[f"session.recall_all@{k}"] = recall_all(
            sessions[:effective], gold_sessions, effective
        )
    return scores


def graded_ndcg(ranked: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """NDCG@k with graded relevance as trec_eval's ``ndcg_cut`` (BEIR's scorer) defines it.

    The gain of a ranked id is its grade (0 when unjudged or not above 0), discounted by
    ``log2(position + 1)`` from position 1; the ideal ranking puts every judged id with a
    grade above 0 first, highest grade first, whether or not the ranking found it.
    """
    _check([item for item, grade in grades.items() if grade > 0])
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    gains = [max(grades.get(item, 0), 0) for item in distinct(ranked)[:k]]
    return _log_discounted(gains) / _log_discounted(ideal)


def _log_discounted(gains: Sequence[float]) -> float:
    return sum(gain / math.log2(position + 1) for position, gain in enumerate(gains, start=1))


def beir_scores(ranked_ids: Sequence[str], grades: Mapping[str, int]) -> dict[str, float]:
    """Every BEIR metric of one query, keyed ``doc.*``: graded NDCG; recall and reciprocal
    rank counting every id graded above 0 as relevant."""
    relevant = {item for item, grade in grades.items() if grade > 0}
    scores = {f"doc.ndcg@{k}": graded_ndcg(ranked_ids, grades, k) for k in BEIR_NDCG_K}
    scores.update(
        {f"doc.recall@{k}": evidence_recall(ranked_ids, relevant, k) for k in BEIR_RECALL_K}
    )
    scores.update({f"doc.mrr@{k}": reciprocal_rank(ranked_ids[:k], relevant) for k in BEIR_MRR_K})
    return scores


def context_scores(
    found_by_budget: Mapping[int, Collection[str]], gold: Collection[str]
) -> dict[str, float]:
    """``context.evidence@B``: the share of the gold memories inside each budget's context."""
    return {
        f"context.evidence@{b}": share_found(found, gold)
        for b, found in sorted(found_by_budget.items())
    }
