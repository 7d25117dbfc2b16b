"""The word channel: BM25 over the memories' words (FTS5's formula and tokens on every
backend and engine), squashed to 0-1 so that it compares with the trigram channel's."""

from __future__ import annotations

from recalld.channels.base import Channel, ranked
from recalld.stores.base import CandidateRequest, ChannelCandidate


def squash(relevance: float) -> float:
    """A BM25 relevance (0 to unbounded) mapped to 0-1, so that the word and the trigram
    index's scores compare."""
    value = abs(relevance)
    return value / (1.0 + value)


def squashed(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    """BM25 relevances as 0-1 scores, in the store's order."""
    return ranked((c.memory_id, squash(c.score)) for c in candidates)


def _asked(request: CandidateRequest) -> bool:
    return bool(request.bm25_limit) and bool(request.terms)


WORDS = Channel("bm25", _asked, "bm25", squashed)
