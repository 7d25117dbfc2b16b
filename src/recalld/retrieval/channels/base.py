"""What a retrieval channel is: the ask it makes of a store, and how the evidence it gets
back is ranked for fusion. Each channel is one module of this package defining its
:class:`Channel`; :mod:`recalld.retrieval.channels` lists them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from recalld.records import TimeRange
from recalld.stores.asks import Ask, ChannelCandidate, ranked

__all__ = ["Channel", "Need", "as_found", "ranked"]


@dataclass(frozen=True)
class Need:
    """What a search knows when it asks the channels: the query's parts, and how many
    candidates each fused list wants (``limits``, by list name; 0 or absent: none)."""

    limits: Mapping[str, int] = field(default_factory=dict)
    terms: tuple[str, ...] = ()
    """Lexical terms (already lower-cased, stopwords removed)."""
    text: str = ""
    """The query text, for matching by pieces (CJK)."""
    entities: tuple[str, ...] = ()
    window: TimeRange | None = None
    """The time the query names, if any."""
    with_vector: bool = False
    """The query is (or will be) embedded: the vector channels can be asked."""

    def limit(self, fused: str) -> int:
        return self.limits.get(fused, 0)


@dataclass(frozen=True)
class Channel:
    """One kind of evidence a store answers (:meth:`recalld.stores.base.Store.candidates`)
    and how the pipeline ranks it.

    ``ask`` turns what the search knows into this channel's ask (None: the channel has
    nothing to ask this time); a store answers it under ``name`` with raw evidence, best
    first, ranked 1, 2, ...; ``rank`` turns that evidence into the scores fusion reads, in
    the list ``fused_as`` (several channels may feed one list: the word, trigram and
    substring channels feed ``bm25``).
    """

    name: str
    """The channel's key in a request's asks and in a store's answer."""
    ask: Callable[[Need], Ask | None]
    """This channel's ask for a search, or None when it has nothing to ask."""
    fused_as: str
    """The ranked list fusion reads this channel's evidence in."""
    rank: Callable[[list[ChannelCandidate]], list[ChannelCandidate]]
    """The store's evidence scored for fusion, in the store's order."""
    merge: Literal["best", "fill", "fallback"] = "best"
    """Where several channels feed one list: a memory keeps its best score (``best``); this
    channel scores only memories no earlier channel found (``fill``); or it is the list
    only when no earlier channel of the list answered (``fallback``)."""
    needs_vector: bool = False
    """Answered from the query vector: the pipeline asks for it once the query is embedded
    (the other channels are read meanwhile)."""


def as_found(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    """The store's evidence as it is: its score already is the one fusion reads."""
    return candidates
