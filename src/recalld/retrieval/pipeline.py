"""The search orchestrator. One function, numbered stages, each a small function elsewhere."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from recalld.providers.embedders import Embedder
from recalld.records import ChannelHit, Hit, MemoryFilter, SearchMode, SearchResult, Trace
from recalld.retrieval.adjust import Scored, adjust
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused, RankedList, linear, rrf
from recalld.retrieval.query import QueryPlan, understand
from recalld.stores.base import CandidateRequest, ChannelCandidate, Store


@dataclass(frozen=True)
class SearchRequest:
    """Everything one search needs besides the store and the embedder."""

    query: str
    limit: int = 10
    mode: SearchMode = "auto"
    filters: MemoryFilter = MemoryFilter()
    as_of: datetime | None = None
    project: str | None = None
    """Boosts memories of this project (it does not filter; use ``filters`` for that)."""
    explain: bool = False


def search(
    store: Store, embedder: Embedder, request: SearchRequest, config: RetrievalConfig, now: datetime
) -> SearchResult:
    """Run the pipeline of SPEC.md:

    1. understand the query (type, terms, entities, time window, mode);
    2. expand it (only with an LLM configured: not yet, so skipped);
    3. retrieve candidates per channel from the store;
    4. fuse the channel lists (weighted RRF or linear merge);
    5. rerank (only with a reranker configured: not yet, so skipped);
    6. adjust scores (decay, priority, pinned, project, type, significance, reinforcement);
    7. filter (relevance threshold that spares exact lexical and entity hits);
    8. assemble the top ``limit``;
    9. explain: traces are built from what stages 3-7 recorded.
    """
    started = time.perf_counter()
    reference = request.as_of or now
    plan = understand(request.query, request.mode, reference)
    lists = retrieve(store, embedder, plan, request, config)
    fused = fuse(lists, config)
    memories = {m.id: m for m in store.get_many([f.memory_id for f in fused])}
    scored = adjust(fused, memories, reference, request.project, config)
    kept = relevance_filter(scored, lists, config)
    hits = build_hits(kept[: request.limit], lists, request.explain)
    return SearchResult(
        query=request.query,
        hits=tuple(hits),
        mode=plan.mode,
        query_type=plan.query_type,
        took_ms=(time.perf_counter() - started) * 1000,
        details={"candidates": len(fused), "time_window": plan.time_window},
    )


def retrieve(
    store: Store,
    embedder: Embedder,
    plan: QueryPlan,
    request: SearchRequest,
    config: RetrievalConfig,
) -> list[RankedList]:
    """Stage 3: one store call answers every channel the mode asks for."""
    pool = max(config.min_candidates, request.limit * config.candidate_multiplier)
    channels = ("semantic",) if plan.mode == "vector" else config.channels
    wanted = {c: pool if c in channels else 0 for c in ("semantic", "bm25", "entity", "temporal")}
    candidate_request = CandidateRequest(
        filters=request.filters,
        query_vector=embedder.embed_query(plan.text) if wanted["semantic"] else None,
        semantic_limit=wanted["semantic"],
        terms=plan.terms,
        raw_query=plan.text,
        bm25_limit=wanted["bm25"],
        entities=plan.entities,
        entity_limit=wanted["entity"],
        time_window=plan.time_window,
        # Recency alone says little about relevance; the channel runs only when the
        # query names a time.
        temporal_limit=wanted["temporal"] if plan.time_window is not None else 0,
    )
    found = store.candidates(candidate_request)
    weight = config.original_query_weight
    return [
        RankedList(name, found[name], weight * config.channel_weights.get(name, 1.0))
        for name in ("semantic", "bm25", "entity", "temporal")
        if found.get(name)
    ]


def fuse(lists: list[RankedList], config: RetrievalConfig) -> list[Fused]:
    """Stage 4."""
    if config.fusion == "linear":
        weights = {"semantic": config.vector_weight, "bm25": config.text_weight}
        return linear(lists, {**config.channel_weights, **weights})
    return rrf(lists, config.rrf_k, config.rank_bonus_first, config.rank_bonus_top3)


def relevance_filter(
    scored: list[Scored], lists: list[RankedList], config: RetrievalConfig
) -> list[Scored]:
    """Stage 7: drop hits under ``min_score`` x top score, sparing exact lexical/entity hits."""
    if not scored or config.min_score <= 0:
        return scored
    exact = {c.memory_id for r in lists if r.name in ("bm25", "entity") for c in r.candidates}
    floor = scored[0].score * config.min_score
    return [s for s in scored if s.score >= floor or s.memory.id in exact]


def build_hits(scored: list[Scored], lists: list[RankedList], explain: bool) -> list[Hit]:
    """Stage 9: wrap survivors as hits; traces reuse the numbers computed above."""
    places: dict[str, list[ChannelHit]] = {}
    if explain:
        for ranked in lists:
            for cand in ranked.candidates:
                places.setdefault(cand.memory_id, []).append(_place(ranked.name, cand))
    hits = []
    for rank, item in enumerate(scored, start=1):
        trace = None
        if explain:
            trace = Trace(
                channels=tuple(places.get(item.memory.id, ())),
                fusion=dict(item.fused.contributions),
                fused_score=item.fused.score,
                adjustments=dict(item.factors),
                filters=("above relevance threshold",),
                final_score=item.score,
            )
        hits.append(Hit(item.memory, item.score, rank, trace))
    return hits


def _place(name: str, cand: ChannelCandidate) -> ChannelHit:
    return ChannelHit(name, cand.rank, cand.score)
