"""What one search asks for, besides the store and the embedder."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from recalld.records import Granularity, MemoryFilter, SearchMode
from recalld.retrieval.config import RetrievalConfig


@dataclass(frozen=True)
class SearchRequest:
    """Everything one search needs besides the store and the embedder."""

    query: str
    limit: int = 10
    mode: SearchMode = "auto"
    filters: MemoryFilter = field(default_factory=MemoryFilter)
    as_of: datetime | None = None
    project: str | None = None
    """Boosts memories of this project (it does not filter; use ``filters`` for that)."""
    explain: bool = False
    granularity: Granularity = "memory"
    """``session`` returns one hit per session (its best memory, the others as related)."""
    near_misses: int = 0
    """Also return this many of the next candidates below the hits, traced."""


def pool_size(request: SearchRequest, config: RetrievalConfig) -> int:
    """How many candidates each channel proposes."""
    return max(
        config.candidates.min_candidates,
        sized_for(request, config) * config.candidates.candidate_multiplier,
    )


def sized_for(request: SearchRequest, config: RetrievalConfig) -> int:
    """The number of results the pools are sized for: ``stable_limit``, or the request's
    limit past it (so a smaller limit never changes which candidates are weighed)."""
    return max(request.limit, config.candidates.stable_limit)
