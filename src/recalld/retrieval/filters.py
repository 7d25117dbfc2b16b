"""Stage 7 filters: relevance threshold, score-gap cut, dedup. Exact hits are never dropped."""

from __future__ import annotations

from collections.abc import Sequence

from recalld.retrieval.adjust import Scored
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import RankedList

PROTECTED_CHANNELS = ("bm25", "entity")
"""A memory these channels found matches the query's own words or names: never cut it."""


def protected_ids(lists: Sequence[RankedList], top: int) -> set[str]:
    """Ids in the top ``top`` of a lexical or entity list."""
    return {
        c.memory_id
        for ranked in lists
        if ranked.name.split(":")[0] in PROTECTED_CHANNELS
        for c in ranked.candidates[:top]
    }


def relevance_filter(
    scored: list[Scored], lists: Sequence[RankedList], config: RetrievalConfig
) -> tuple[list[Scored], dict[str, str]]:
    """Drop hits under ``min_score`` x the top score, or past a score gap.

    Returns the survivors and, per candidate, why it was kept or dropped.
    """
    if not scored:
        return scored, {}
    cut = config.assembly
    exact = protected_ids(lists, cut.protect_top)
    floor = scored[0].score * cut.min_score
    kept: list[Scored] = []
    reasons: dict[str, str] = {}
    gap_hit = False
    for i, item in enumerate(scored):
        if cut.max_gap > 0 and i > 0 and not gap_hit:
            previous = scored[i - 1].score
            gap_hit = previous > 0 and (previous - item.score) / previous > cut.max_gap
        above = item.score >= floor and not gap_hit
        if above or item.memory.id in exact:
            kept.append(item)
            reasons[item.memory.id] = (
                "above relevance threshold" if above else "exact lexical/entity match (protected)"
            )
        else:
            reasons[item.memory.id] = (
                f"dropped: under the relevance threshold ({cut.min_score:g} x the top score)"
                if item.score < floor
                else f"dropped: past a score gap of more than {cut.max_gap:.0%}"
            )
    return kept, reasons


def dedupe(scored: list[Scored]) -> tuple[list[Scored], int]:
    """Keep the best-scored copy of identical content (e.g. a turn stored twice, or a chunk
    overlapping an identical chunk); returns survivors and how many were folded."""
    seen: set[str] = set()
    kept: list[Scored] = []
    for item in scored:
        key = item.memory.content_hash
        if key in seen:
            continue
        seen.add(key)
        kept.append(item)
    return kept, len(scored) - len(kept)
