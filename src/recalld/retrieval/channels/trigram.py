"""The trigram channel: CJK text, which has no spaces between words, matched by its
3-character pieces (BM25 over a trigram index), and pieces shorter than 3 characters by a
substring scan. Both feed the word channel's list (``bm25``)."""

from __future__ import annotations

from recalld.lexical import trigram_terms
from recalld.retrieval.channels.base import Channel, Need, ranked
from recalld.retrieval.channels.words import squashed
from recalld.stores.asks import ChannelCandidate, TextAsk

SUBSTRING_SCORE = 0.5
"""The lexical score of a memory found only by a substring match (CJK pieces too short for
the trigram index): a match without a BM25 relevance, ranked as a middling one."""


def _grams_ask(need: Need) -> TextAsk | None:
    limit = need.limit("bm25")
    return TextAsk(limit, need.text) if limit and trigram_terms(need.text)[0] else None


def _short_ask(need: Need) -> TextAsk | None:
    limit = need.limit("bm25")
    return TextAsk(limit, need.text) if limit and trigram_terms(need.text)[1] else None


def _substring_scores(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    return ranked((c.memory_id, SUBSTRING_SCORE) for c in candidates)


TRIGRAM = Channel("trigram", _grams_ask, "bm25", squashed)
SUBSTRING = Channel("substring", _short_ask, "bm25", _substring_scores, merge="fill")
