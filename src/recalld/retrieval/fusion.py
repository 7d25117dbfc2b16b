"""Fusion of ranked candidate lists. Pure functions; contributions are recorded as scored."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from recalld.records import frozen_made
from recalld.stores.base import ChannelCandidate


@dataclass(frozen=True)
class RankedList:
    """One ranked list to fuse: a channel's candidates for one query."""

    name: str
    """Unique label, e.g. ``semantic`` or ``bm25:expansion1``."""
    candidates: Sequence[ChannelCandidate]
    weight: float = 1.0
    original: bool = True
    """Whether the list comes from the user's own query (eligible for the top-rank bonus)."""


@dataclass(frozen=True)
class Fused:
    """A memory's fused score and each list's share of it."""

    memory_id: str
    score: float
    contributions: Mapping[str, float] = field(default_factory=dict)
    rerank: Mapping[str, float] = field(default_factory=dict)
    """Set by the rerank stage: position, retrieval weight and score, reranker score, blend
    (then ``score`` is the blend)."""


def rrf(
    lists: Sequence[RankedList],
    k: int = 60,
    bonus_first: float = 0.05,
    bonus_top3: float = 0.02,
    keep: int | None = None,
) -> list[Fused]:
    """Weighted reciprocal rank fusion with QMD's top-rank bonus.

    ``score = sum(weight / (k + rank))`` over the lists a memory appears in, plus
    ``bonus_first`` (rank 1) or ``bonus_top3`` (ranks 2-3) for its best rank in an
    original-query list. Shares are summed exactly (``math.fsum``) and ties break by memory
    id, so neither the score nor the order depends on the order of the lists. ``keep``:
    only the first that many are returned (the rest are never made).
    """
    parts: dict[str, dict[str, float]] = {}
    best: dict[str, int] = {}  # the best rank <= 3 in an original list: all the bonus needs
    for ranked in lists:
        name, weight = ranked.name, ranked.weight
        eligible = ranked.original and weight > 0
        for cand in ranked.candidates:
            memory_id, rank = cand.memory_id, cand.rank
            share = parts.get(memory_id)
            if share is None:
                parts[memory_id] = {name: weight / (k + rank)}
            else:
                share[name] = share.get(name, 0.0) + weight / (k + rank)
            if eligible and rank <= 3 and rank < best.get(memory_id, 4):
                best[memory_id] = rank
    for memory_id, rank in best.items():
        bonus = bonus_first if rank == 1 else bonus_top3
        if bonus:
            parts[memory_id]["top_rank_bonus"] = bonus
    ordered = sorted(
        ((math.fsum(s.values()), m) for m, s in parts.items()), key=lambda pair: (-pair[0], pair[1])
    )
    return [_fused(m, score, parts[m]) for score, m in ordered[:keep]]


def linear(lists: Sequence[RankedList], weights: Mapping[str, float]) -> list[Fused]:
    """OpenClaw's weighted merge: ``sum(w_channel * normalised score)``.

    Scores are min-max normalised within each list; weights are normalised to sum 1 over
    the channels present. A list's channel is the part of its name before ``:``.
    """
    present = {r.name.split(":")[0] for r in lists}
    total = sum(weights.get(c, 0.0) for c in present) or 1.0
    parts: dict[str, dict[str, float]] = {}
    for ranked in lists:
        if not ranked.candidates:
            continue
        scores = [c.score for c in ranked.candidates]
        low, high = min(scores), max(scores)
        span = high - low
        weight = weights.get(ranked.name.split(":")[0], 0.0) / total
        for cand in ranked.candidates:
            norm = 1.0 if span == 0 else (cand.score - low) / span
            share = parts.setdefault(cand.memory_id, {})
            share[ranked.name] = max(share.get(ranked.name, 0.0), weight * norm)
    return _sorted([Fused(m, math.fsum(s.values()), s) for m, s in parts.items()])


def _fused(memory_id: str, score: float, contributions: dict[str, float]) -> Fused:
    """A :class:`Fused` made by :func:`~recalld.records.frozen_made`: fusion makes one per
    candidate of every search."""
    return frozen_made(
        Fused, memory_id=memory_id, score=score, contributions=contributions, rerank={}
    )


def _sorted(fused: list[Fused]) -> list[Fused]:
    return sorted(fused, key=lambda f: (-f.score, f.memory_id))
