"""The entity channel: memories naming the query's entities (people, places, projects),
scored by how many of them each names."""

from __future__ import annotations

from recalld.retrieval.channels.base import Channel, Need, as_found
from recalld.stores.asks import EntitiesAsk


def _ask(need: Need) -> EntitiesAsk | None:
    limit = need.limit("entity")
    return EntitiesAsk(limit, need.entities) if limit and need.entities else None


ENTITY = Channel("entity", _ask, "entity", as_found)
