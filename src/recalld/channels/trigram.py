"""The trigram channel: CJK text, which has no spaces between words, matched by its
3-character pieces (BM25 over a trigram index), and pieces shorter than 3 characters by a
substring scan. Both feed the word channel's list (``bm25``)."""

from __future__ import annotations

from recalld.channels.base import Channel, ranked
from recalld.channels.words import squashed
from recalld.lexical import trigram_terms
from recalld.stores.base import CandidateRequest, ChannelCandidate

SUBSTRING_SCORE = 0.5
"""The lexical score of a memory found only by a substring match (CJK pieces too short for
the trigram index): a match without a BM25 relevance, ranked as a middling one."""


def _grams_asked(request: CandidateRequest) -> bool:
    return bool(request.bm25_limit) and bool(trigram_terms(request.raw_query)[0])


def _short_asked(request: CandidateRequest) -> bool:
    return bool(request.bm25_limit) and bool(trigram_terms(request.raw_query)[1])


def _substring_scores(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    return ranked((c.memory_id, SUBSTRING_SCORE) for c in candidates)


TRIGRAM = Channel("trigram", _grams_asked, "bm25", squashed)
SUBSTRING = Channel("substring", _short_asked, "bm25", _substring_scores, merge="fill")
