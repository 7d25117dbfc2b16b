"""The retrieval channels, one module each (:mod:`.semantic`, :mod:`.words`,
:mod:`.trigram`, :mod:`.entity`, :mod:`.temporal`): what each asks of a store and how its
evidence is ranked for fusion.

A search asks every channel of :data:`CHANNELS` for its ask (:func:`request`); a store
answers each ask it has a reader for with raw evidence (a cosine, a BM25 relevance, a
reference time); every ranking decision made on that evidence lives in the channel's
module, so that each backend returns the same kind of numbers and none has to copy them.
A new channel is a module here, its line in :data:`CHANNELS`, and one reader per backend
(see ``docs/design/architecture.md``, "Channels").
"""

from __future__ import annotations

from collections.abc import Mapping

from recalld.records import MemoryFilter
from recalld.retrieval.channels.base import Channel, Need, ranked
from recalld.retrieval.channels.entity import ENTITY
from recalld.retrieval.channels.semantic import SEMANTIC
from recalld.retrieval.channels.temporal import RECENT, WINDOW
from recalld.retrieval.channels.trigram import SUBSTRING, TRIGRAM
from recalld.retrieval.channels.words import WORDS, squash
from recalld.retrieval.config import LISTS
from recalld.stores.asks import Ask, CandidateRequest, ChannelCandidate

CHANNELS: tuple[Channel, ...] = (SEMANTIC, WINDOW, WORDS, TRIGRAM, SUBSTRING, ENTITY, RECENT)
"""Every channel, in the order a search asks them and, within a fused list, merges them."""
assert {c.fused_as for c in CHANNELS} <= set(LISTS), "a channel feeds a list fusion lacks"
NAMES = frozenset(c.name for c in CHANNELS)
BY_NAME = {c.name: c for c in CHANNELS}

__all__ = [
    "BY_NAME",
    "CHANNELS",
    "LISTS",
    "NAMES",
    "Channel",
    "Need",
    "channel_lists",
    "ranked",
    "request",
    "split_channels",
    "squash",
]


def request(need: Need, filters: MemoryFilter | None = None) -> CandidateRequest:
    """The store request of a search that knows ``need``: every channel's ask, in
    :data:`CHANNELS` order, for the channels that have something to ask."""
    asks: dict[str, Ask] = {}
    for channel in CHANNELS:
        ask = channel.ask(need)
        if ask is not None:
            asks[channel.name] = ask
    return CandidateRequest(filters or MemoryFilter(), asks)


def split_channels(
    request: CandidateRequest,
) -> tuple[CandidateRequest, CandidateRequest | None]:
    """The request's channels that need the query vector, and the others (None when it
    asks for no other)."""
    vector_names = [n for n in request.asks if n in BY_NAME and BY_NAME[n].needs_vector]
    others = [n for n in request.asks if n not in vector_names]
    if not others:
        return request.only(vector_names), None
    return request.only(vector_names), request.only(others)


def channel_lists(
    found: Mapping[str, list[ChannelCandidate]], bm25_limit: int
) -> dict[str, list[ChannelCandidate]]:
    """The lists fusion reads (:data:`LISTS`) from a store's evidence: each channel's
    evidence ranked by its module; where several channels feed one list, merged by their
    :attr:`~recalld.retrieval.channels.base.Channel.merge` rule, best first (ties in the
    order found) and cut at ``bm25_limit``."""
    out: dict[str, list[ChannelCandidate]] = {}
    for fused in LISTS:
        members: list[Channel] = []
        for c in CHANNELS:
            if c.fused_as == fused and c.name in found and not (c.merge == "fallback" and members):
                members.append(c)
        if len(members) == 1:
            out[fused] = members[0].rank(found[members[0].name])
        elif members:
            out[fused] = _merged(members, found, bm25_limit)
    return out


def _merged(
    members: list[Channel], found: Mapping[str, list[ChannelCandidate]], limit: int
) -> list[ChannelCandidate]:
    scored: dict[str, float] = {}
    for channel in members:
        for c in channel.rank(found[channel.name]):
            if channel.merge == "best":
                scored[c.memory_id] = max(scored.get(c.memory_id, 0.0), c.score)
            else:  # fill (a fallback is never merged: it stands alone or not at all)
                scored.setdefault(c.memory_id, c.score)
    return ranked(sorted(scored.items(), key=lambda kv: -kv[1])[:limit])
