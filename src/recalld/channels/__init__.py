"""The retrieval channels, one module each (:mod:`~recalld.channels.semantic`,
:mod:`~recalld.channels.words`, :mod:`~recalld.channels.trigram`,
:mod:`~recalld.channels.entity`, :mod:`~recalld.channels.temporal`): what each asks of a
store and how its evidence is ranked for fusion.

A store answers a :class:`~recalld.stores.base.CandidateRequest` with raw evidence per
channel (a cosine, a BM25 relevance, a reference time); every ranking decision made on that
evidence lives in the channel's module, so that each backend returns the same kind of
numbers and none has to copy them. A backend answers each channel through one reader (see
``docs/design/architecture.md``, "Channels").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from recalld.channels.base import Channel, ranked
from recalld.channels.entity import ENTITY
from recalld.channels.semantic import SEMANTIC
from recalld.channels.temporal import RECENT, WINDOW, temporal_channels
from recalld.channels.trigram import SUBSTRING, TRIGRAM
from recalld.channels.words import WORDS, squash
from recalld.stores.base import CandidateRequest, ChannelCandidate

CHANNELS: tuple[Channel, ...] = (SEMANTIC, WINDOW, WORDS, TRIGRAM, SUBSTRING, ENTITY, RECENT)
"""Every channel, in the order a store answers them and, within a fused list, merges them."""
LISTS = ("semantic", "bm25", "entity", "temporal")
"""The lists fusion reads, in this order (a list's weight and trace follow it)."""
NAMES = frozenset(c.name for c in CHANNELS)

__all__ = ["CHANNELS", "LISTS", "NAMES", "Channel", "asked_channels", "channel_lists",
           "ranked", "split_channels", "squash", "temporal_channels"]  # fmt: skip


def asked_channels(request: CandidateRequest, answered: frozenset[str] = NAMES) -> tuple[str, ...]:
    """The channels ``request`` asks for, of those a store answers (``answered``; see
    ``Store.channels``); the store answers each, matched or not."""
    return tuple(c.name for c in CHANNELS if c.name in answered and c.asked(request))


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
    """The lists fusion reads (:data:`LISTS`) from a store's evidence: each channel's
    evidence ranked by its module; where several channels feed one list, merged by their
    :attr:`~recalld.channels.base.Channel.merge` rule, best first (ties in the order found)
    and cut at ``bm25_limit``."""
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
