"""Channel evidence from the store, turned into the ranked lists the pipeline fuses.

A store returns raw evidence per channel (see :class:`recalld.stores.base.Store`): a cosine,
a BM25 relevance, a reference time. Every ranking decision made on that evidence lives
here, so that each backend returns the same kind of numbers and none has to copy them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from recalld.stores.base import CandidateRequest, ChannelCandidate

SUBSTRING_SCORE = 0.5
"""The lexical score of a memory found only by a substring match (CJK pieces too short for
the trigram index): a match without a BM25 relevance, ranked as a middling one."""
RECENCY_HALF_LIFE_S = 30 * 86400.0
"""The temporal channel's recency score halves with every 30 days before the newest
candidate: a ranking inside a window, not a decay of the final score."""


def squash(relevance: float) -> float:
    """A BM25 relevance (0 to unbounded) mapped to 0-1, so that the word and the trigram
    index's scores compare."""
    value = abs(relevance)
    return value / (1.0 + value)


def temporal_channels(request: CandidateRequest, with_vector: bool) -> CandidateRequest:
    """Ask for the temporal channel in the form the query calls for: inside a time window
    with a query vector (``with_vector``: the request has one, or will), the memories of
    the window most similar to the query; otherwise the newest memories (of the window, if
    any)."""
    if request.time_window is None or not with_vector or not request.temporal_limit:
        return request
    return replace(request, window_semantic_limit=request.temporal_limit, temporal_limit=0)


def split_channels(
    request: CandidateRequest,
) -> tuple[CandidateRequest, CandidateRequest | None]:
    """The request's channels that need the query vector, and the others (None when it
    asks for no other)."""
    vector_part = replace(request, terms=(), raw_query="", bm25_limit=0, entities=(),
                          entity_limit=0, temporal_limit=0)  # fmt: skip
    if not (request.bm25_limit or request.entity_limit or request.temporal_limit):
        return vector_part, None
    words_part = replace(request, query_vector=None, semantic_limit=0, window_semantic_limit=0)
    return vector_part, words_part


def channel_lists(
    found: Mapping[str, list[ChannelCandidate]], bm25_limit: int
) -> dict[str, list[ChannelCandidate]]:
    """The fused channels (``semantic``, ``bm25``, ``entity``, ``temporal``) from the
    store's evidence: the lexical indexes merged into ``bm25``, and the temporal channel
    scored by recency or taken from the window's semantic candidates."""
    out: dict[str, list[ChannelCandidate]] = {}
    for name in ("semantic", "entity"):
        if name in found:
            out[name] = found[name]
    if any(name in found for name in ("bm25", "trigram", "substring")):
        out["bm25"] = lexical(found.get("bm25", []), found.get("trigram", []),
                              found.get("substring", []), bm25_limit)  # fmt: skip
    if "window_semantic" in found:
        out["temporal"] = found["window_semantic"]
    elif "temporal" in found:
        out["temporal"] = recency(found["temporal"])
    return out


def lexical(
    words: list[ChannelCandidate],
    trigrams: list[ChannelCandidate],
    substrings: list[ChannelCandidate],
    limit: int,
) -> list[ChannelCandidate]:
    """One lexical list: each memory keeps the better of its word and trigram scores; a
    substring match alone scores :data:`SUBSTRING_SCORE`. Ties keep the order found."""
    scored: dict[str, float] = {c.memory_id: squash(c.score) for c in words}
    for c in trigrams:
        scored[c.memory_id] = max(scored.get(c.memory_id, 0.0), squash(c.score))
    for c in substrings:
        scored.setdefault(c.memory_id, SUBSTRING_SCORE)
    return ranked(sorted(scored.items(), key=lambda kv: -kv[1])[:limit])


def recency(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    """Newest first (the store's order, by reference time): 1 for the newest, halving with
    every :data:`RECENCY_HALF_LIFE_S` before it."""
    if not candidates:
        return []
    newest = candidates[0].score
    return ranked((c.memory_id, 0.5 ** ((newest - c.score) / RECENCY_HALF_LIFE_S))
                  for c in candidates)  # fmt: skip


def ranked(pairs: Iterable[tuple[str, float]]) -> list[ChannelCandidate]:
    """(id, score) pairs, best first, as 1-based ranked candidates."""
    return [ChannelCandidate(memory_id, rank, float(score))
            for rank, (memory_id, score) in enumerate(pairs, start=1)]  # fmt: skip
