"""Stage 3 of a search: the candidates every channel proposes, read from the store in one
call (two at the same time where the store says that pays), with the rows, vectors and
session neighbours the later stages read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from recalld.providers.embedders import Embedder, sharing_cores
from recalld.retrieval.channels import (
    LISTS,
    Need,
    channel_lists,
    request as channel_request,
    semantic as semantic_channel,
    split_channels,
)
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import RankedList
from recalld.retrieval.query import QueryPlan
from recalld.retrieval.request import SearchRequest, pool_size
from recalld.stores.base import CandidateRequest, SearchRows, Store, Vector
from recalld.threads import LazyPool


def retrieve(
    store: Store,
    embedder: Embedder,
    plan: QueryPlan,
    request: SearchRequest,
    config: RetrievalConfig,
    query_vector: Vector | None = None,
) -> tuple[list[RankedList], SearchRows, Vector | None]:
    """Stage 3: one store call answers every channel the mode asks for, with the rows the
    later stages read (two calls at the same time where the store says that pays,
    :func:`read_candidates`; ``query_vector``: the query's, when stage 2 embedded it
    already). Also returns the query's vector, when the semantic channel ran."""
    pool = pool_size(request, config)
    channels = ("semantic",) if plan.mode == "vector" else config.candidates.channels
    wanted = {c: pool if c in channels else 0 for c in LISTS}
    with_vector = wanted["semantic"] > 0
    need = Need(wanted, plan.terms, plan.text, plan.entities, plan.time_window, with_vector)
    requests = [channel_request(need, request.filters)]
    if plan.time_terms and wanted["bm25"] and config.fusion.time_terms_weight > 0:
        time_need = Need({"bm25": wanted["bm25"]}, plan.time_terms, " ".join(plan.time_terms))
        requests.append(channel_request(time_need, request.filters))

    embedded: list[Vector] = []

    def embed() -> Vector:
        vector = embedder.embed_query(plan.text) if query_vector is None else query_vector
        embedded.append(vector)
        return vector

    sessions = config.sessions
    rows = read_candidates(
        store,
        requests,
        embed if with_vector else None,
        vectors=needs_vectors(config),
        neighbor_radius=sessions.neighbor_radius if sessions.neighbor_weight > 0 else 0,
        neighbor_depth=sessions.neighbor_depth,
    )
    if embedded and not store.exact_vectors():
        rows = complete_vectors(store, rows, embedded[0], wanted["semantic"])
    found = channel_lists(rows.channels[0], pool)
    weight = config.fusion.original_query_weight
    lists = [
        RankedList(name, found[name], weight * config.fusion.channel_weights.get(name, 1.0))
        for name in LISTS
        if found.get(name)
    ]
    if len(rows.channels) > 1:
        timed = channel_lists(rows.channels[1], pool).get("bm25")
        if timed:
            lists.append(
                RankedList("bm25_time", timed, weight * config.fusion.time_terms_weight, False)
            )
    return lists, rows, (embedded[0] if embedded else None)


def complete_vectors(store: Store, rows: SearchRows, query: Vector, limit: int) -> SearchRows:
    """Where an approximate index answered the vector channel, the memories the other
    channels found but it missed take the places their exact cosines give them
    (:func:`recalld.retrieval.channels.semantic.completed`): what fusion reads of them is
    then what an exact search gives, at the cost of reading their vectors."""
    found = rows.channels[0]
    nearest = found.get("semantic")
    if nearest is None:
        return rows
    listed = {c.memory_id for c in nearest}
    others = list(
        dict.fromkeys(
            c.memory_id
            for name, candidates in found.items()
            if name != "semantic"
            for c in candidates
            if c.memory_id not in listed
        )
    )
    if not others:
        return rows
    vectors = {i: rows.vectors[i] for i in others if i in rows.vectors}
    read = store.vectors_for([i for i in others if i not in vectors])
    vectors.update(read)
    if not vectors:
        return rows
    ids = list(vectors)
    scores = np.einsum("ij,j->i", np.stack([vectors[i] for i in ids]), query)
    nearest = semantic_channel.completed(
        nearest, dict(zip(ids, scores.tolist(), strict=True)), limit
    )
    # The vectors read stay with the rows: the later stages read them from there.
    return replace(
        rows,
        channels=({**found, "semantic": nearest}, *rows.channels[1:]),
        vectors={**rows.vectors, **read} if read else rows.vectors,
    )


WORD_THREADS = 4
"""Threads that read word channels while searches embed their queries (one per search in
flight; more searches at once wait for one)."""
_word_threads = LazyPool(WORD_THREADS, "recalld-words")


def read_candidates(
    store: Store,
    requests: Sequence[CandidateRequest],
    embed: Callable[[], Vector] | None,
    **flags: Any,
) -> SearchRows:
    """Stage 3's store call; ``embed`` gives the query vector the first request's vector
    channels need (None: no channel needs one), ``flags`` are :meth:`Store.search_rows`'s.

    Where the store says it pays (:meth:`Store.parallel_reads`), the word channels are read
    on a second thread while this one embeds the query (on one thread) and searches the
    vectors: the same candidates, sooner (BM25 over a large store and the query's embedding
    each take milliseconds, and both leave the interpreter free while they run)."""
    if embed is None:
        return store.search_rows(requests, **flags)
    vector_part, words_part = split_channels(requests[0])
    if (words_part is None and len(requests) == 1) or not store.parallel_reads():
        first = requests[0].with_vector(embed())
        return store.search_rows([first, *requests[1:]], **flags)
    words_requests = [words_part, *requests[1:]] if words_part else list(requests[1:])

    def by_vector_here() -> SearchRows:
        with sharing_cores():
            vector = embed()
        return store.search_rows([vector_part.with_vector(vector)], **flags)

    def by_words_beside() -> SearchRows:
        completing = words_part is not None and not store.exact_vectors()
        found = store.search_rows(words_requests, **flags, candidate_vectors=completing)
        if not completing:
            return found
        # Vector completion will want their vectors: read them here, while the other
        # thread searches the vectors (the index's answer is not known yet, so all of them).
        ids = list(
            dict.fromkeys(
                c.memory_id
                for listed in found.channels[0].values()
                for c in listed
                if c.memory_id not in found.vectors
            )
        )
        return replace(found, vectors={**found.vectors, **store.vectors_for(ids)})

    by_vector, (by_words,) = _word_threads.run_beside(by_vector_here, [by_words_beside])
    word_channels = list(by_words.channels)
    first_found = {**by_vector.channels[0], **(word_channels.pop(0) if words_part else {})}
    return SearchRows(
        (first_found, *word_channels),
        {**by_words.memories, **by_vector.memories},
        {**by_words.vectors, **by_vector.vectors},
        {**by_words.neighbors, **by_vector.neighbors},
        by_words.neighbors_of | by_vector.neighbors_of,
    )


def needs_vectors(config: RetrievalConfig, updates: bool = True) -> bool:
    """Whether a stage compares memories by their vectors (``updates``: whether knowledge
    updates apply to this query)."""
    return (updates and config.updates.kupdate_factor < 1.0) or (
        config.assembly.mmr_similarity == "cosine"
        and (config.assembly.mmr_lambda < 1.0 or config.assembly.diverse_aggregation)
    )
