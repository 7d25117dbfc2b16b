"""The temporal channel: for a query about a time, the memories of its window most similar
to the query (``window_semantic``, with a query vector); otherwise the newest memories (of
the window, if any), scored by recency."""

from __future__ import annotations

from dataclasses import replace

from recalld.channels.base import Channel, as_found, ranked
from recalld.stores.base import CandidateRequest, ChannelCandidate

RECENCY_HALF_LIFE_S = 30 * 86400.0
"""The temporal channel's recency score halves with every 30 days before the newest
candidate: a ranking inside a window, not a decay of the final score."""


def temporal_channels(request: CandidateRequest, with_vector: bool) -> CandidateRequest:
    """Ask for the temporal channel in the form the query calls for: inside a time window
    with a query vector (``with_vector``: the request has one, or will), the memories of
    the window most similar to the query; otherwise the newest memories (of the window, if
    any)."""
    if request.time_window is None or not with_vector or not request.temporal_limit:
        return request
    return replace(request, window_semantic_limit=request.temporal_limit, temporal_limit=0)


def recency(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    """Newest first (the store's order, by reference time): 1 for the newest, halving with
    every :data:`RECENCY_HALF_LIFE_S` before it."""
    if not candidates:
        return []
    newest = candidates[0].score
    return ranked((c.memory_id, 0.5 ** ((newest - c.score) / RECENCY_HALF_LIFE_S))
                  for c in candidates)  # fmt: skip


def _window_asked(request: CandidateRequest) -> bool:
    return bool(request.window_semantic_limit) and request.query_vector is not None


def _recent_asked(request: CandidateRequest) -> bool:
    return bool(request.temporal_limit)


WINDOW = Channel("window_semantic", _window_asked, "temporal", as_found, needs_vector=True)
RECENT = Channel("temporal", _recent_asked, "temporal", recency, merge="fallback")
