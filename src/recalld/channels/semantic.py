"""The semantic channel: the memories whose vectors are nearest the query's, scored by
cosine similarity (exact, or from a vector index whose recall the benchmarks measure)."""

from __future__ import annotations

from recalld.channels.base import Channel, as_found
from recalld.stores.base import CandidateRequest


def _asked(request: CandidateRequest) -> bool:
    return bool(request.semantic_limit) and request.query_vector is not None


SEMANTIC = Channel("semantic", _asked, "semantic", as_found, needs_vector=True)
