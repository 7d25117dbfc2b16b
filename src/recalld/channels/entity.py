"""The entity channel: memories naming the query's entities (people, places, projects),
scored by how many of them each names."""

from __future__ import annotations

from recalld.channels.base import Channel, as_found
from recalld.stores.base import CandidateRequest


def _asked(request: CandidateRequest) -> bool:
    return bool(request.entity_limit) and bool(request.entities)


ENTITY = Channel("entity", _asked, "entity", as_found)
