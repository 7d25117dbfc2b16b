"""What a search asks of a store: a set of asks, one per channel, each naming only what
its channel needs (``CandidateRequest.asks``), and the ranked evidence a store returns.

Invariants:

- a store answers every ask it has a reader for, under the ask's channel name, matched or
  not, and no other; a channel it has no reader for is simply not in its answer;
- an ask is the whole of what a reader may read of the request, besides the request's
  filters: a new channel brings its own ask type (or reuses one below) and one reader per
  backend, and nothing else in the store protocol changes;
- evidence is raw (a cosine, a BM25 relevance, a time): ranking decisions on it live with
  the channel, in :mod:`recalld.retrieval.channels`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from recalld.records import MemoryFilter, TimeRange

if TYPE_CHECKING:  # annotations only: the channels are imported where numpy is not yet
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Ask:
    """What one channel asks of a store: its ``limit`` best memories, best first."""

    limit: int


@dataclass(frozen=True)
class NearestAsk(Ask):
    """The memories whose vectors are nearest ``vector`` by cosine (inside ``window`` when
    one is given)."""

    vector: Vector | None = None
    """None until the query is embedded (:meth:`CandidateRequest.with_vector`)."""
    window: TimeRange | None = None
    near_memory: bool = False
    """``vector`` is a stored memory's own and the few nearest are asked (the memories
    near a memory): an approximate index may search a narrower neighbourhood."""


@dataclass(frozen=True)
class WordsAsk(Ask):
    """BM25 of ``terms`` (already lower-cased, stopwords removed) in the word index."""

    terms: tuple[str, ...]


@dataclass(frozen=True)
class TextAsk(Ask):
    """The query's own text, for matching by pieces (CJK trigrams, short substrings)."""

    text: str


@dataclass(frozen=True)
class EntitiesAsk(Ask):
    """Memories carrying any of ``entities``, by how many."""

    entities: tuple[str, ...]


@dataclass(frozen=True)
class RecentAsk(Ask):
    """The newest memories (inside ``window`` when one is given)."""

    window: TimeRange | None = None


@dataclass(frozen=True)
class CandidateRequest:
    """The filters every channel shares, and each asked channel's own ask, by name."""

    filters: MemoryFilter = field(default_factory=MemoryFilter)
    asks: Mapping[str, Ask] = field(default_factory=dict)

    @property
    def needs_vector(self) -> bool:
        """Some ask waits for the query's vector."""
        return any(isinstance(a, NearestAsk) and a.vector is None for a in self.asks.values())

    @property
    def query_vector(self) -> Vector | None:
        """The vector the request's nearest-vector asks share (the query's), if any."""
        return next(
            (
                a.vector
                for a in self.asks.values()
                if isinstance(a, NearestAsk) and a.vector is not None
            ),
            None,
        )

    @property
    def near_memory(self) -> bool:
        """Every nearest-vector ask searches from a stored memory's own vector (and there
        is one): an approximate index may search a narrower neighbourhood."""
        nearest = [a for a in self.asks.values() if isinstance(a, NearestAsk)]
        return bool(nearest) and all(a.near_memory for a in nearest)

    def with_vector(self, vector: Vector) -> CandidateRequest:
        """Every nearest-vector ask that waits for the query's vector given ``vector``."""
        asks = {
            name: replace(a, vector=vector) if isinstance(a, NearestAsk) and a.vector is None else a
            for name, a in self.asks.items()
        }
        return replace(self, asks=asks)

    def only(self, names: Iterable[str]) -> CandidateRequest:
        """The same request asking only the channels in ``names``."""
        keep = set(names)
        return replace(self, asks={n: a for n, a in self.asks.items() if n in keep})


class ChannelCandidate(NamedTuple):
    """One memory proposed by one channel; ranks are 1-based within the channel.

    A named tuple, not a frozen dataclass: a search makes several hundred of these, and a
    tuple is made at a fraction of the cost."""

    memory_id: str
    rank: int
    score: float


def ranked(pairs: Iterable[tuple[str, float]]) -> list[ChannelCandidate]:
    """(id, score) pairs, best first, as 1-based ranked candidates."""
    return [
        ChannelCandidate(memory_id, rank, float(score))
        for rank, (memory_id, score) in enumerate(pairs, start=1)
    ]
