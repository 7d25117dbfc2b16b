"""What a retrieval channel is: the evidence it asks a store for, and how that evidence is
ranked for fusion. Each channel is one module of this package defining its
:class:`Channel`; :mod:`recalld.channels` lists them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from recalld.stores.base import CandidateRequest, ChannelCandidate


@dataclass(frozen=True)
class Channel:
    """One kind of evidence a store answers (:meth:`recalld.stores.base.Store.candidates`)
    and how the pipeline ranks it.

    A store answers ``name`` with its raw evidence, best first, ranked 1, 2, ...; ``rank``
    turns that evidence into the scores fusion reads, in the list ``fused_as`` (several
    channels may feed one list: the word, trigram and substring channels feed ``bm25``).
    """

    name: str
    """The channel's key in a store's answer and in :func:`recalld.channels.asked_channels`."""
    asked: Callable[[CandidateRequest], bool]
    """Whether a request asks for this channel (a store answers it, matched or not)."""
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


def ranked(pairs: Iterable[tuple[str, float]]) -> list[ChannelCandidate]:
    """(id, score) pairs, best first, as 1-based ranked candidates."""
    return [ChannelCandidate(memory_id, rank, float(score))
            for rank, (memory_id, score) in enumerate(pairs, start=1)]  # fmt: skip


def as_found(candidates: list[ChannelCandidate]) -> list[ChannelCandidate]:
    """The store's evidence as it is: its score already is the one fusion reads."""
    return candidates
