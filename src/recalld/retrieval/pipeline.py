"""The search orchestrator. One function, numbered stages, each a small function elsewhere."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from recalld.channels import LISTS, channel_lists, split_channels, temporal_channels
from recalld.channels import semantic as semantic_channel
from recalld.providers.embedders import Embedder, sharing_cores
from recalld.records import (
    ChannelHit,
    Granularity,
    Hit,
    Memory,
    MemoryFilter,
    SearchMode,
    SearchResult,
    Trace,
)
from recalld.retrieval.adjust import (
    QueryContext,
    Scored,
    adjust,
    identifiers,
    knowledge_updates,
    role_readable,
    time_order,
    wanted_role,
)
from recalld.retrieval.assemble import cosine_similarity, jaccard_similarity, mmr, session_diverse
from recalld.retrieval.calibration import UNCALIBRATED, Calibration, calibrate
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.dates import anchor_window
from recalld.retrieval.expand import expand
from recalld.retrieval.filters import dedupe, relevance_filter
from recalld.retrieval.fusion import Fused, RankedList, linear, rrf
from recalld.retrieval.models import Models, StageNote
from recalld.retrieval.query import QueryPlan, understand
from recalld.retrieval.rerank import rerank
from recalld.retrieval.routing import route
from recalld.retrieval.sessions import (
    apply_session_support,
    group_by_session,
    neighbor_support,
    sessions_absent,
    topic_support,
)
from recalld.retrieval.updates import follow_updates
from recalld.stores.base import CandidateRequest, ChannelCandidate, SearchRows, Store, Vector
from recalld.text import keywords, words
from recalld.threads import LazyPool, searching


@dataclass(frozen=True)
class SearchRequest:
    """Everything one search needs besides the store and the embedder."""

    query: str
    limit: int = 10
    mode: SearchMode = "auto"
    filters: MemoryFilter = field(default_factory=MemoryFilter)
    as_of: datetime | None = None
    project: str | None = None
    """Boosts memories of this project (it does not filter; use ``filters`` for that)."""
    explain: bool = False
    granularity: Granularity = "memory"
    """``session`` returns one hit per session (its best memory, the others as related)."""
    near_misses: int = 0
    """Also return this many of the next candidates below the hits, traced."""


def search(
    store: Store,
    embedder: Embedder,
    request: SearchRequest,
    config: RetrievalConfig,
    now: datetime,
    models: Models | None = None,
) -> SearchResult:
    """Run the pipeline of SPEC.md.

    1. understand the query (type, terms, entities, time window, ordering, whether it asks
       for advice, mode); an event it is relative to ("before I moved") is found with a
       small search and becomes the time window;
       with an LLM configured, ``auto`` mode is routed by the query's complexity;
    2. expand it (only with an LLM configured: typed lex / vec / hyde expansions, skipped
       on a strong BM25 signal);
    3. retrieve candidates per channel, all channels in one store call that also returns
       their rows, vectors and session neighbours (and one call per expansion); on a large
       SQLite store the word channels are read on a second thread meanwhile;
    4. fuse the channel lists (weighted RRF with top-rank bonus, or linear merge);
    5. rerank the top ``rerank_depth`` (only with a reranker configured), blended with the
       fused position;
    6. adjust scores (decay, priority, pinned, project, type, significance, reinforcement,
       role, event statements, memories that only ask, time window, earliest/latest
       ordering), then knowledge updates, session evidence, the session's topic for
       queries that ask for advice, and neighbour evidence;
    7. filter: dedup identical content, relevance threshold and score gap (exact lexical
       and entity hits are never dropped);
    8. assemble: MMR diversity, or session-diverse selection for aggregation queries;
    9. explain: traces are built from the numbers stages 3-7 recorded.
    """
    with searching():
        return _search(store, embedder, request, config, now, models)


def _search(
    store: Store,
    embedder: Embedder,
    request: SearchRequest,
    config: RetrievalConfig,
    now: datetime,
    models: Models | None,
) -> SearchResult:
    started = time.perf_counter()
    reference = request.as_of or now
    calibration = calibrate(embedder)
    plan = understand(request.query, request.mode, reference)
    plan = place_anchor(store, embedder, plan, request, config, calibration)
    notes: list[StageNote] = []
    expanded = None
    if models is not None:
        if request.mode == "auto":
            mode, note = route(request.query, plan.mode, models, config.llm_routing)
            plan, notes = replace(plan, mode=mode), [note]
        expanded = expand(store, embedder, plan, request.filters, config, models,
                          pool_size(request, config))  # fmt: skip
        notes.append(expanded.note)
    lists, rows = retrieve(store, embedder, plan, request, config,
                           expanded.query_vector if expanded else None)  # fmt: skip
    undated = window_unanswered(plan, lists, config) and not _dated(store, rows, lists)
    if undated:
        plan = replace(plan, time_window=None, terms=(*plan.terms, *plan.time_terms),
                       time_terms=())  # fmt: skip
        lists, rows = retrieve(store, embedder, plan, request, config,
                               expanded.query_vector if expanded else None)  # fmt: skip
    lists += expanded.lists if expanded else ()
    lists, signal = trust_words(lists, config)
    fused = fuse(
        lists, config, max(config.min_adjust, sized_for(request, config) * config.adjust_depth)
    )
    memories = _rows(store, rows, [f.memory_id for f in fused])
    if models is not None:
        fused, note = rerank(fused, memories, request.query, plan.terms, models, config)
        notes.append(note)
    ctx = QueryContext(reference, request.project, wanted_role(request.query), plan.time_window,
                       frozenset(words(request.query)), plan.advice,
                       identifiers=identifiers(request.query))  # fmt: skip
    scored = adjust(fused, memories, ctx, config)
    scored = time_order(scored, plan.order, config)
    # Current facts first does not apply to questions about the past or that count
    # across sessions: for them no vector is read unless diversity needs it.
    past = (
        plan.order == "earliest"
        or plan.time_window is not None
        or asks_past(plan.text)
        or plan.query_type == "aggregation"
    )
    vectors = _Vectors(store, rows, scored, config, updates=not past)
    readable = role_readable(request.query)
    aside = stood_aside(scored, plan, config, past=past, undated=undated, readable=readable,
                        vectors_exact=store.exact_vectors())  # fmt: skip
    scored = apply_session_support(scored, config)
    # each semantic candidate's query cosine (calibrated), for three stages
    cosines = _cosines(lists, calibration)
    if plan.advice:
        scored = topic_support(scored, cosines, config)
    if config.kupdate_follow > 0 and not past:
        vectors.read(scored[: config.kupdate_follow])
        scored = follow_updates(scored, vectors.found, store, request.filters, config, cosines,
                                calibration, plan.terms, aside)  # fmt: skip
    if config.neighbor_weight > 0:
        top = [s.memory.id for s in scored[: config.neighbor_depth]]
        scored = neighbor_support(
            scored,
            _neighbors(store, rows, top, config.neighbor_radius),
            lambda ids: _rows(store, rows, ids),
            config,
            ctx.role if readable else "user",
        )
    if not past:
        vectors.read(scored[: config.kupdate_window])
    scored = knowledge_updates(scored, vectors.found, config, reference, not past, cosines,
                               calibration, aside)  # fmt: skip
    ranked = scored
    folded = 0
    if config.dedupe:
        scored, folded = dedupe(scored)
    kept, reasons = relevance_filter(scored, lists, config)
    if request.granularity == "session":
        groups = group_by_session(kept)[: request.limit]
        chosen = [g[0] for g in groups]
        hits = build_hits(chosen, lists, reasons if request.explain else None)
        hits = [
            replace(h, related=tuple(s.memory for s in g[1:]))
            for h, g in zip(hits, groups, strict=True)
        ]
    else:
        vectors.read(kept)
        chosen = assemble(kept, plan, vectors.found, config, request.limit)
        hits = build_hits(chosen, lists, reasons if request.explain else None)
    missed = near_misses(ranked, chosen, reasons, request, config)
    return SearchResult(
        query=request.query,
        hits=tuple(hits),
        mode=plan.mode,
        query_type=plan.query_type,
        took_ms=(time.perf_counter() - started) * 1000,
        details={
            "candidates": len(fused),
            "time_window": plan.time_window,
            "anchor": None
            if plan.anchor_memory is None or plan.anchor is None
            else {
                "relation": plan.anchor.relation,
                "event": plan.anchor.text,
                "dated_by": plan.anchor_memory,
            },
            "entities": plan.entities,
            "advice": plan.advice,
            "deduplicated": folded,
            "filtered": len(scored) - len(kept),
            "stood_aside": aside,
            "strong_words": signal,
            **({"stages": [n.as_dict() for n in notes]} if models is not None else {}),
        },
        near_misses=tuple(
            replace(h, rank=len(hits) + h.rank)
            for h in build_hits(
                [m for m, _ in missed], lists, {m.memory.id: why for m, why in missed}
            )  # fmt: skip
        ),
    )


def near_misses(
    ranked: Sequence[Scored],
    chosen: Sequence[Scored],
    reasons: Mapping[str, str],
    request: SearchRequest,
    config: RetrievalConfig,
) -> list[tuple[Scored, str]]:
    """The first ``request.near_misses`` candidates (in adjusted-score order, before
    dedup) that are not hits, each with why it lost: a copy of a better memory's content,
    a relevance cut (``reasons`` of stage 7), another memory of its session (session
    granularity), passed over for diversity, or simply under the last hit."""
    if request.near_misses <= 0:
        return []
    taken = {s.memory.id for s in chosen}
    sessions = {s.memory.session_id or s.memory.id for s in chosen}
    lowest = min((s.score for s in chosen), default=0.0)
    seen: set[str] = set()
    missed: list[tuple[Scored, str]] = []
    for item in ranked:
        memory = item.memory
        copy = memory.content_hash in seen
        seen.add(memory.content_hash)
        if memory.id in taken:
            continue
        reason = reasons.get(memory.id, "")
        if copy and config.dedupe:
            reason = "dropped: the same content as a better-scored memory"
        elif reason.startswith("dropped"):
            pass
        elif request.granularity == "session" and (memory.session_id or memory.id) in sessions:
            reason = "another memory of its session ranked higher"
        elif item.score > lowest and len(chosen) == request.limit:
            reason = "passed over for diversity: too like a hit above it"
        else:
            reason = (f"ranked under the last of the {request.limit} hits asked for "
                      f"({item.score:.4f} < {lowest:.4f})")  # fmt: skip
        held = sorted((v, k) for k, v in item.factors.items() if v < 1.0)
        if held:
            reason += "; held down by " + ", ".join(f"{k} x{v:.3f}" for v, k in held)
        missed.append((item, reason))
        if len(missed) == request.near_misses:
            break
    return missed


def window_unanswered(
    plan: QueryPlan, lists: Sequence[RankedList], config: RetrievalConfig
) -> bool:
    """Whether the query names a time ("in 2010", "last March") that no memory is dated in:
    the temporal channel ran and found none. Where the candidates carry no times of their
    own either (documents dated only by their import, :func:`_dated`), the window cannot be
    answered: the time words are then searched as words like the others, and no window
    boosts or cuts anything."""
    return (
        plan.time_window is not None
        and plan.anchor_memory is None
        and plan.mode != "vector"
        and "temporal" in config.channels
        and not any(ranked.name == "temporal" for ranked in lists)
    )


def _dated(store: Store, rows: SearchRows, lists: Sequence[RankedList], depth: int = 10) -> bool:
    """Whether the top candidates carry times of their own (:func:`times_of_their_own`)."""
    ids = list(dict.fromkeys(c.memory_id for ranked in lists for c in ranked.candidates[:depth]))
    return times_of_their_own(_rows(store, rows, ids).values())


ANCHOR_PEERS = 5
"""How many memories closest to an event the anchor stage reads to judge whether the store's
memories carry times of their own."""


def times_of_their_own(memories: Iterable[Memory]) -> bool:
    """Whether memories carry times of their own: an event time, or storage times that
    differ (memories written as things happened). Memories without event times all stored
    at one moment (one import of documents) do not."""
    listed = list(memories)
    return any(m.event_time is not None for m in listed) or len({m.created_at for m in listed}) > 1


def stood_aside(
    scored: Sequence[Scored],
    plan: QueryPlan,
    config: RetrievalConfig,
    *,
    past: bool,
    undated: bool = False,
    readable: bool = True,
    vectors_exact: bool = True,
) -> dict[str, str]:
    """The mechanisms whose premise does not hold for this query on these candidates, and
    why: they leave every score as it is (the trace says so rather than staying silent).
    ``undated``: the time window could not be answered; ``readable``: the query's role cues
    can be read (:func:`~recalld.retrieval.adjust.role_readable`); ``vectors_exact``: the
    store scored every vector (:meth:`~recalld.stores.base.Store.exact_vectors`)."""
    aside: dict[str, str] = {}
    if vectors_exact:
        aside["vector_completion"] = (
            "every vector was scored: the vector channel missed none of the nearest"
        )
    if config.reply_weight > 0 and not readable:
        aside["reply_support"] = (
            "the query's language gives no cue to whether it asks what the user said"
        )
    if plan.anchor is not None and plan.anchor_memory is None and config.anchor_events:
        aside["anchor_event"] = (
            "no memory close enough to the event the query names, or the memories carry no "
            "times of their own to place it"
        )
    if undated:
        aside["time_window"] = (
            "no memory is dated inside the time the query names: its time words were "
            "searched as words"
        )
    if sessions_absent(scored):
        why = "no candidate belongs to a session"
        aside.update(session_support=why, session_topic=why, neighbor_support=why)
    if past:
        aside["knowledge_updates"] = (
            "the question asks about the past or across sessions, where an older value "
            "may be the answer (explicit supersede marks still apply)"
        )
    return aside


_PAST = re.compile(r"\b(?:did|was|were|had|used to)\b", re.IGNORECASE)


def asks_past(query: str) -> bool:
    """A question in the past tense ("when did she go", "what was the plan") asks what
    happened, not what holds now: current facts first does not apply to it."""
    return _PAST.search(query) is not None


def place_anchor(
    store: Store,
    embedder: Embedder,
    plan: QueryPlan,
    request: SearchRequest,
    config: RetrievalConfig,
    calibration: Calibration = UNCALIBRATED,
) -> QueryPlan:
    """Stage 1b: "before I moved" -> the time of the memory that best says "I moved" (by
    cosine on the embedder's ``calibration`` scale, trusted at ``anchor_min_score`` or
    above) -> the window before it. A query that names a time itself keeps that time.

    Premise: the memories carry times of their own (:func:`times_of_their_own`, read on the
    event's closest ``ANCHOR_PEERS``): in a store of documents all stored at one moment, "3
    hours after the addition of BMP4" names no moment of the store, and the event's words
    are the query's subject."""
    anchor = plan.anchor
    if anchor is None or plan.time_window is not None or not config.anchor_events:
        return plan
    found = store.candidates(
        CandidateRequest(
            filters=request.filters,
            query_vector=embedder.embed_query(anchor.text),
            semantic_limit=ANCHOR_PEERS,
        )
    ).get("semantic", [])
    if not found or calibration.query_lift(found[0].score) < config.anchor_min_score:
        return plan
    by_id = {m.id: m for m in store.get_many([c.memory_id for c in found])}
    event = by_id.get(found[0].memory_id)
    if event is None or not times_of_their_own(by_id.values()):
        return plan
    window = anchor_window(anchor.relation, event.reference_time)
    # Like time words, the event's words only say when: as search terms they would rank
    # the event itself ("I moved to Lisbon") above what happened before or after it.
    event_words = set(keywords(anchor.text))
    terms = tuple(t for t in plan.terms if t not in event_words) or plan.terms
    return replace(plan, time_window=window, terms=terms, anchor_memory=event.id)


def retrieve(
    store: Store,
    embedder: Embedder,
    plan: QueryPlan,
    request: SearchRequest,
    config: RetrievalConfig,
    query_vector: Vector | None = None,
) -> tuple[list[RankedList], SearchRows]:
    """Stage 3: one store call answers every channel the mode asks for, with the rows the
    later stages read (two calls at the same time where the store says that pays,
    :func:`read_candidates`; ``query_vector``: the query's, when stage 2 embedded it
    already)."""
    pool = pool_size(request, config)
    channels = ("semantic",) if plan.mode == "vector" else config.channels
    wanted = {c: pool if c in channels else 0 for c in LISTS}
    with_vector = wanted["semantic"] > 0
    candidate_request = CandidateRequest(
        filters=request.filters,
        semantic_limit=wanted["semantic"],
        terms=plan.terms,
        raw_query=plan.text,
        bm25_limit=wanted["bm25"],
        entities=plan.entities,
        entity_limit=wanted["entity"],
        time_window=plan.time_window,
        # Recency alone says little about relevance: the channel runs only when the
        # query names a time.
        temporal_limit=wanted["temporal"] if plan.time_window is not None else 0,
    )
    requests = [temporal_channels(candidate_request, with_vector)]
    if plan.time_terms and wanted["bm25"] and config.time_terms_weight > 0:
        requests.append(CandidateRequest(filters=request.filters, terms=plan.time_terms,
                                         raw_query=" ".join(plan.time_terms),
                                         bm25_limit=wanted["bm25"]))  # fmt: skip

    embedded: list[Vector] = []

    def embed() -> Vector:
        vector = embedder.embed_query(plan.text) if query_vector is None else query_vector
        embedded.append(vector)
        return vector

    rows = read_candidates(
        store,
        requests,
        embed if with_vector else None,
        vectors=_needs_vectors(config),
        neighbor_radius=config.neighbor_radius if config.neighbor_weight > 0 else 0,
        neighbor_depth=config.neighbor_depth,
    )
    if embedded and not store.exact_vectors():
        rows = complete_vectors(store, rows, embedded[0], wanted["semantic"])
    found = channel_lists(rows.channels[0], pool)
    weight = config.original_query_weight
    lists = [
        RankedList(name, found[name], weight * config.channel_weights.get(name, 1.0))
        for name in LISTS
        if found.get(name)
    ]
    if len(rows.channels) > 1:
        timed = channel_lists(rows.channels[1], pool).get("bm25")
        if timed:
            lists.append(RankedList("bm25_time", timed, weight * config.time_terms_weight, False))
    return lists, rows


def complete_vectors(store: Store, rows: SearchRows, query: Vector, limit: int) -> SearchRows:
    """Where an approximate index answered the vector channel, the memories the other
    channels found but it missed take the places their exact cosines give them
    (:func:`recalld.channels.semantic.completed`): what fusion reads of them is then what an
    exact search gives, at the cost of reading their vectors."""
    found = rows.channels[0]
    nearest = found.get("semantic")
    if nearest is None:
        return rows
    listed = {c.memory_id for c in nearest}
    others = list(dict.fromkeys(c.memory_id for name, candidates in found.items()
                                if name != "semantic" for c in candidates
                                if c.memory_id not in listed))  # fmt: skip
    if not others:
        return rows
    vectors = {i: rows.vectors[i] for i in others if i in rows.vectors}
    vectors.update(store.vectors_for([i for i in others if i not in vectors]))
    if not vectors:
        return rows
    ids = list(vectors)
    scores = np.einsum("ij,j->i", np.stack([vectors[i] for i in ids]), query)
    nearest = semantic_channel.completed(nearest, dict(zip(ids, scores.tolist(), strict=True)),
                                         limit)  # fmt: skip
    return replace(rows, channels=({**found, "semantic": nearest}, *rows.channels[1:]))


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
        first = replace(requests[0], query_vector=embed())
        return store.search_rows([first, *requests[1:]], **flags)
    words_requests = [words_part, *requests[1:]] if words_part else list(requests[1:])

    def by_vector_here() -> SearchRows:
        with sharing_cores():
            vector = embed()
        return store.search_rows([replace(vector_part, query_vector=vector)], **flags)

    def by_words_beside() -> SearchRows:
        found = store.search_rows(words_requests, **flags)
        if words_part is None or store.exact_vectors():
            return found
        # Vector completion will want their vectors: read them here, while the other
        # thread searches the vectors (the index's answer is not known yet, so all of them).
        ids = list(dict.fromkeys(c.memory_id for listed in found.channels[0].values()
                                 for c in listed if c.memory_id not in found.vectors))  # fmt: skip
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


def pool_size(request: SearchRequest, config: RetrievalConfig) -> int:
    """How many candidates each channel proposes."""
    return max(config.min_candidates, sized_for(request, config) * config.candidate_multiplier)


def sized_for(request: SearchRequest, config: RetrievalConfig) -> int:
    """The number of results the pools are sized for: ``stable_limit``, or the request's
    limit past it (so a smaller limit never changes which candidates are weighed)."""
    return max(request.limit, config.stable_limit)


def trust_words(
    lists: list[RankedList], config: RetrievalConfig
) -> tuple[list[RankedList], dict[str, float] | None]:
    """Stage 3b, query-dependent channel trust (QMD's strong signal): when the BM25 list's
    top hit is clear (0-1 score at least ``strong_signal_score``, ahead of the second by
    ``strong_signal_gap``), that list weighs ``strong_signal_weight`` x as much, so a weak
    vector ranking does not outvote an exact word match. Returns the lists and the signal
    (None when it is not strong, or the weight is 1)."""
    if config.strong_signal_weight == 1.0:
        return lists, None
    for i, ranked in enumerate(lists):
        if ranked.name != "bm25" or not ranked.candidates:
            continue
        top = ranked.candidates[0].score
        gap = top - (ranked.candidates[1].score if len(ranked.candidates) > 1 else 0.0)
        if top < config.strong_signal_score or gap < config.strong_signal_gap:
            return lists, None
        trusted = replace(ranked, weight=ranked.weight * config.strong_signal_weight)
        return [*lists[:i], trusted, *lists[i + 1 :]], {"top": top, "gap": gap}
    return lists, None


def fuse(lists: list[RankedList], config: RetrievalConfig, keep: int) -> list[Fused]:
    """Stage 4: the first ``keep`` of the fused ranking."""
    if config.fusion == "linear":
        weights = {"semantic": config.vector_weight, "bm25": config.text_weight}
        return linear(lists, {**config.channel_weights, **weights})[:keep]
    return rrf(lists, config.rrf_k, config.rank_bonus_first, config.rank_bonus_top3, keep)


def _cosines(lists: Sequence[RankedList], calibration: Calibration) -> dict[str, float]:
    """Each semantic candidate's similarity to the query, on the calibrated scale."""
    return {c.memory_id: calibration.query_lift(c.score) for ranked in lists
            if ranked.name == "semantic" for c in ranked.candidates}  # fmt: skip


def _needs_vectors(config: RetrievalConfig, updates: bool = True) -> bool:
    """Whether a stage compares memories by their vectors (``updates``: whether knowledge
    updates apply to this query)."""
    return (updates and config.kupdate_factor < 1.0) or (
        config.mmr_similarity == "cosine"
        and (config.mmr_lambda < 1.0 or config.diverse_aggregation)
    )


class _Vectors:
    """The vectors the stages that compare memories read: those of the top candidates
    after adjusting (``max(kupdate_window, 100)``), each read when a stage first asks for
    it (the top hit for following it forward, the top ``kupdate_window`` for knowledge
    updates, the kept ones for diversity), none when no stage compares."""

    def __init__(
        self,
        store: Store,
        rows: SearchRows,
        scored: Sequence[Scored],
        config: RetrievalConfig,
        updates: bool = True,
    ) -> None:
        self._store, self._rows = store, rows
        needed = _needs_vectors(config, updates)
        self._allowed = (
            {s.memory.id for s in scored[: max(config.kupdate_window, 100)]} if needed else set()
        )
        self._tried: set[str] = set()
        self.found: dict[str, np.ndarray] = {}

    def read(self, scored: Sequence[Scored]) -> None:
        """Read the vectors of these memories (of the allowed ones not read yet)."""
        ids = [s.memory.id for s in scored
               if s.memory.id in self._allowed and s.memory.id not in self._tried]  # fmt: skip
        if not ids:
            return
        self._tried.update(ids)
        held = {i: self._rows.vectors[i] for i in ids if i in self._rows.vectors}
        missing = [i for i in ids if i not in held and i not in self.found]
        self.found.update(held)
        if missing:  # not read with the candidates (a backend in the same process)
            for memory_id, vector in self._store.vectors_for(missing).items():
                self.found.setdefault(memory_id, vector)


def _rows(store: Store, rows: SearchRows, ids: Sequence[str]) -> dict[str, Memory]:
    """The memories of ``ids`` in that order (those read with the candidates, the others
    fetched here); unknown ids skipped."""
    missing = [i for i in ids if i not in rows.memories]
    fetched = {m.id: m for m in store.get_many(missing)} if missing else {}
    known = {**rows.memories, **fetched}
    return {i: known[i] for i in ids if i in known}


def _neighbors(
    store: Store, rows: SearchRows, ids: Sequence[str], radius: int
) -> Mapping[str, list[tuple[str, int]]]:
    """Session neighbours of ``ids``: those read with the candidates, the rest asked for."""
    found = {i: rows.neighbors[i] for i in ids if i in rows.neighbors}
    missing = [i for i in ids if i not in rows.neighbors_of]
    return {**found, **store.session_neighbors(missing, radius)} if missing else found


def assemble(
    scored: list[Scored],
    plan: QueryPlan,
    vectors: Mapping[str, np.ndarray],
    config: RetrievalConfig,
    limit: int,
) -> list[Scored]:
    """Stage 8: diversity where it is asked for, then the top ``limit``."""
    similarity = (
        cosine_similarity(vectors) if config.mmr_similarity == "cosine" else jaccard_similarity()
    )
    if config.diverse_aggregation and plan.query_type == "aggregation":
        return session_diverse(scored, similarity, config.diversity_lambda, limit)
    if config.mmr_lambda < 1.0:
        return mmr(scored, similarity, config.mmr_lambda, limit)
    return scored[:limit]


def build_hits(
    scored: list[Scored], lists: list[RankedList], reasons: Mapping[str, str] | None
) -> list[Hit]:
    """Stage 9: wrap survivors as hits; traces reuse the numbers computed above."""
    places: dict[str, list[ChannelHit]] = {}
    if reasons is not None and scored:
        wanted = {item.memory.id for item in scored}  # not every channel's whole pool
        for ranked in lists:
            for cand in ranked.candidates:
                if cand.memory_id in wanted:
                    places.setdefault(cand.memory_id, []).append(_place(ranked.name, cand))
    hits = []
    for rank, item in enumerate(scored, start=1):
        trace = None
        if reasons is not None:
            trace = Trace(
                channels=tuple(places.get(item.memory.id, ())),
                fusion=dict(item.fused.contributions),
                fused_score=item.fused.score,
                rerank=dict(item.fused.rerank),
                adjustments=dict(item.factors),
                filters=(reasons.get(item.memory.id, "kept"),),
                final_score=item.score,
            )
        hits.append(Hit(item.memory, item.score, rank, trace))
    return hits


def _place(name: str, cand: ChannelCandidate) -> ChannelHit:
    return ChannelHit(name, cand.rank, cand.score)
