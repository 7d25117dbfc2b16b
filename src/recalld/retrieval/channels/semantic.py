"""The semantic channel: the memories whose vectors are nearest the query's, scored by
cosine similarity (exact, or from a vector index whose recall the benchmarks measure)."""

from __future__ import annotations

from collections.abc import Mapping

from recalld.retrieval.channels.base import Channel, Need, as_found, ranked
from recalld.stores.asks import ChannelCandidate, NearestAsk


def _ask(need: Need) -> NearestAsk | None:
    limit = need.limit("semantic")
    return NearestAsk(limit) if limit and need.with_vector else None


SEMANTIC = Channel("semantic", _ask, "semantic", as_found, needs_vector=True)


def completed(
    found: list[ChannelCandidate], cosines: Mapping[str, float], limit: int
) -> list[ChannelCandidate]:
    """An approximate index's nearest (``found``, best first) completed with the exact
    ``cosines`` of memories it missed that other channels found: each takes the place its
    cosine gives it, ties by id as an exact search orders them, cut at ``limit``. On an
    exact answer it changes nothing, since no memory it missed can be nearer than its last."""
    listed = {c.memory_id for c in found}
    pairs = [(c.memory_id, c.score) for c in found]
    pairs += [(memory_id, score) for memory_id, score in cosines.items() if memory_id not in listed]
    if len(pairs) == len(found):
        return found
    return ranked(sorted(pairs, key=lambda p: (-p[1], p[0]))[:limit])
