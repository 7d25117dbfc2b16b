"""Heading evidence: where a document section's heading path answers the query.

A chunk of an indexed markdown file carries the headings it sits under
(``metadata["headings"]``, e.g. ``Editor > [editor.soft-wrap] Section``). The heading path is
what the author called the section: a short, deliberate summary that the chunk's body,
often a table or a list, may never spell out. The channels see it only as the first line of
a 400-token chunk, where it weighs as one line among many.

This stage ranks the top fused candidates twice more, by their heading paths alone:

- **by words**: how many of the query's keywords (stemmed as the word index stems them) the
  path names;
- **by meaning**: the cosine of the query's vector to the path's (the paths are embedded as
  documents; the embedder's cache keeps them for the next query).

Both rankings join the fusion as two more RRF lists (``heading_words``,
``heading_meaning``) of weight ``heading_weight``, not eligible for the top-rank bonus. Only
ranks are used, never a cosine value, so no threshold belongs to one embedder.

**Premise.** Heading paths compare sections of documents with one another. The stage applies
only when every one of the top ``heading_depth`` candidates is a chunk of an indexed file
and at least two of them have a heading path; otherwise (a store of conversations, a mix
of memories and documents, where a heading could only lift a document over memories that
cannot have one) it stands aside and says why in ``details["stood_aside"]``. The words list
needs the word channel in the search, the meaning list the semantic channel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from recalld.lexical import tokenize_many
from recalld.providers.embedders import Embedder
from recalld.records import Memory
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused, RankedList
from recalld.stores.base import ChannelCandidate
from recalld.text import keywords

WORDS_LIST = "heading_words"
MEANING_LIST = "heading_meaning"
MIN_HEADED = 2
"""Fewer candidates with a heading path than this leaves nothing to compare."""
HEADING_SEPARATOR = " > "
"""How a path is written, as the chunker writes it on a chunk's first line."""


@dataclass(frozen=True)
class HeadingEvidence:
    """The lists to fuse, or why the stage stood aside (then ``lists`` is empty)."""

    lists: tuple[RankedList, ...] = ()
    aside: str | None = None


def heading_path(memory: Memory) -> str:
    """A file chunk's heading path as one line; empty for anything else."""
    if memory.source.kind != "file":
        return ""
    headings = memory.metadata.get("headings")
    if not isinstance(headings, list):
        return ""
    return HEADING_SEPARATOR.join(str(h) for h in headings if str(h).strip())


def premise(top: Sequence[Fused], memories: Mapping[str, Memory]) -> str | None:
    """Why heading evidence does not apply to these candidates, or ``None`` when it does."""
    chosen = [memories[f.memory_id] for f in top if f.memory_id in memories]
    if not chosen:
        return "no candidates"
    if any(m.source.kind != "file" for m in chosen):
        return "the top candidates are not all chunks of indexed files"
    if sum(1 for m in chosen if heading_path(m)) < MIN_HEADED:
        return f"fewer than {MIN_HEADED} top candidates have a heading path"
    return None


def heading_lists(
    fused: Sequence[Fused],
    memories: Mapping[str, Memory],
    lists: Sequence[RankedList],
    query: str,
    embedder: Embedder,
    config: RetrievalConfig,
    query_vector: np.ndarray | None = None,
) -> HeadingEvidence:
    """Stage 4b of the search: heading evidence as ``config`` asks, the words list where
    the word channel ran, the meaning list where the semantic one did (``query_vector``:
    the query's, when an earlier stage embedded it already)."""
    if config.fusion.heading_weight <= 0 or config.fusion.method != "rrf":
        return HeadingEvidence()
    ran = {ranked.name for ranked in lists}

    def vector() -> np.ndarray:
        if query_vector is not None:
            return np.asarray(query_vector)
        return np.asarray(embedder.embed_query(query))

    return heading_evidence(
        fused,
        memories,
        query,
        vector if "semantic" in ran else None,
        embedder,
        weight=config.fusion.heading_weight,
        depth=config.fusion.heading_depth,
        words="bm25" in ran,
    )


def heading_evidence(
    fused: Sequence[Fused],
    memories: Mapping[str, Memory],
    query: str,
    query_vector: Callable[[], np.ndarray] | None,
    embedder: Embedder,
    *,
    weight: float,
    depth: int,
    words: bool,
) -> HeadingEvidence:
    """The heading lists for the top ``depth`` of ``fused`` (see the module docstring).

    ``query_vector``: gives the query's vector (``None`` when the search ran no semantic
    channel); ``words``: whether the search ran the word channel.
    """
    top = list(fused[:depth])
    why = premise(top, memories)
    if why is not None:
        return HeadingEvidence(aside=why)
    paths = {f.memory_id: heading_path(memories[f.memory_id]) for f in top}
    headed = [i for i, p in paths.items() if p]
    lists: list[RankedList] = []
    if words:
        lists.append(RankedList(WORDS_LIST, by_words(query, headed, paths), weight, False))
    if query_vector is not None:
        ranked = by_meaning(query_vector(), headed, paths, embedder)
        lists.append(RankedList(MEANING_LIST, ranked, weight, False))
    return HeadingEvidence(tuple(lst for lst in lists if lst.candidates))


def by_words(query: str, ids: Sequence[str], paths: Mapping[str, str]) -> list[ChannelCandidate]:
    """``ids`` whose path names any query keyword, most named first (ties keep fused order)."""
    texts = [" ".join(keywords(query)), *(paths[i] for i in ids)]
    query_terms, *path_terms = (set(t) for t in tokenize_many(texts))
    named = [(len(query_terms & terms), i) for i, terms in zip(ids, path_terms, strict=True)]
    order = sorted((pair for pair in named if pair[0] > 0), key=lambda pair: -pair[0])
    return [ChannelCandidate(i, rank, float(n)) for rank, (n, i) in enumerate(order, start=1)]


def by_meaning(
    query: np.ndarray, ids: Sequence[str], paths: Mapping[str, str], embedder: Embedder
) -> list[ChannelCandidate]:
    """``ids`` by the cosine of their heading path to the query (ties keep fused order)."""
    distinct = list(dict.fromkeys(paths[i] for i in ids))
    vectors = np.asarray(embedder.embed_documents(distinct).vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1) * max(float(np.linalg.norm(query)), 1e-12)
    cosine = dict(zip(distinct, (vectors @ query) / np.maximum(norms, 1e-12), strict=True))
    order = sorted(ids, key=lambda i: -float(cosine[paths[i]]))
    return [ChannelCandidate(i, rank, float(cosine[paths[i]])) for rank, i in enumerate(order, 1)]
