"""The word channel: BM25 over the memories' words (FTS5's formula and tokens on every
backend and engine), squashed to 0-1 so that it compares with the trigram channel's."""

from __future__ import annotations

from recalld.retrieval.channels.base import Channel, Need, ranked
from recalld.stores.asks import ChannelCandidate, WordsAsk


def squash(relevance: float) -> float:
    """A BM25 relevance (0 to unbounded) mapped to 0-1, so that the word and the trigram
    index's scores compare."""
    value = abs(relevance)
    return value / (1.0 + value)


def squashed(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    """BM25 relevances as 0-1 scores, in the store's order."""
    return ranked((c.memory_id, squash(c.score)) for c in candidates)


def _ask(need: Need) -> WordsAsk | None:
    limit = need.limit("bm25")
    return WordsAsk(limit, need.terms) if limit and need.terms else None


WORDS = Channel("bm25", _ask, "bm25", squashed)
