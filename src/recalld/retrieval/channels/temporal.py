"""The temporal channel: for a query about a time, the memories of its window most similar
to the query (``window_semantic``, with a query vector); otherwise the newest memories of
the window, scored by recency. Recency alone says little about relevance: neither runs
when the query names no time."""

from __future__ import annotations

from recalld.retrieval.channels.base import Channel, Need, as_found, ranked
from recalld.stores.asks import ChannelCandidate, NearestAsk, RecentAsk

RECENCY_HALF_LIFE_S = 30 * 86400.0
"""The temporal channel's recency score halves with every 30 days before the newest
candidate: a ranking inside a window, not a decay of the final score."""


def recency(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    """Newest first (the store's order, by reference time): 1 for the newest, halving with
    every :data:`RECENCY_HALF_LIFE_S` before it."""
    if not candidates:
        return []
    newest = candidates[0].score
    return ranked(
        (c.memory_id, 0.5 ** ((newest - c.score) / RECENCY_HALF_LIFE_S)) for c in candidates
    )


def _window_ask(need: Need) -> NearestAsk | None:
    limit = need.limit("temporal")
    if not limit or need.window is None or not need.with_vector:
        return None
    return NearestAsk(limit, window=need.window)


def _recent_ask(need: Need) -> RecentAsk | None:
    limit = need.limit("temporal")
    if not limit or need.window is None or need.with_vector:
        return None
    return RecentAsk(limit, window=need.window)


WINDOW = Channel("window_semantic", _window_ask, "temporal", as_found, needs_vector=True)
RECENT = Channel("temporal", _recent_ask, "temporal", recency, merge="fallback")
