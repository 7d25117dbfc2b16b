"""Stage 8, assembly: MMR diversity, session-diverse selection, token-budgeted selection."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from recalld.retrieval.adjust import Scored
from recalld.text import keywords

T = TypeVar("T")
Similarity = Callable[[Scored, Scored], float]


def fit_budget(items: Sequence[T], cost: Callable[[T], int], budget: int) -> list[T]:
    """Take items in order while they fit; an item too big is skipped, not a stop (CEMS)."""
    chosen: list[T] = []
    used = 0
    for item in items:
        size = cost(item)
        if used + size <= budget:
            chosen.append(item)
            used += size
    return chosen


def jaccard_similarity() -> Similarity:
    """Jaccard overlap of keyword sets (OpenClaw's MMR similarity)."""
    cache: dict[str, frozenset[str]] = {}

    def tokens(item: Scored) -> frozenset[str]:
        found = cache.get(item.memory.id)
        if found is None:
            found = cache[item.memory.id] = frozenset(keywords(item.memory.content))
        return found

    def similarity(a: Scored, b: Scored) -> float:
        ta, tb = tokens(a), tokens(b)
        union = len(ta | tb)
        return len(ta & tb) / union if union else 0.0

    return similarity


def cosine_similarity(vectors: Mapping[str, np.ndarray]) -> Similarity:
    """Cosine of the memories' (normalised) vectors; 0 when a vector is unknown."""

    def similarity(a: Scored, b: Scored) -> float:
        va, vb = vectors.get(a.memory.id), vectors.get(b.memory.id)
        return 0.0 if va is None or vb is None else float(va @ vb)

    return similarity


def mmr(items: Sequence[Scored], similarity: Similarity, lam: float, k: int) -> list[Scored]:
    """Maximal marginal relevance: ``lam x relevance - (1 - lam) x max similarity`` to the
    items already chosen; relevance is the score normalised by the top score."""
    if not items or lam >= 1.0:
        return list(items[:k])
    top = items[0].score or 1.0
    pool = list(items)
    chosen = [pool.pop(0)]
    while pool and len(chosen) < k:
        best_index, best_value = 0, -np.inf
        for index, item in enumerate(pool):
            redundancy = max(similarity(item, c) for c in chosen)
            value = lam * item.score / top - (1 - lam) * redundancy
            if value > best_value:
                best_index, best_value = index, value
        chosen.append(pool.pop(best_index))
    return chosen


def session_diverse(
    items: Sequence[Scored], similarity: Similarity, lam: float, k: int
) -> list[Scored]:
    """CEMS's two-phase selection for aggregation queries: first the best item of each
    session (by MMR), then fill the rest by MMR over everything left."""
    firsts: dict[str, Scored] = {}
    for item in items:
        firsts.setdefault(item.memory.session_id or item.memory.id, item)
    phase_one = mmr(list(firsts.values()), similarity, lam, k)
    taken = {i.memory.id for i in phase_one}
    rest = [i for i in items if i.memory.id not in taken]
    if len(phase_one) >= k or not rest:
        return phase_one[:k]
    return phase_one + mmr(rest, similarity, lam, k - len(phase_one))
