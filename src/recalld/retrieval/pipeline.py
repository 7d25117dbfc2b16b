"""The search orchestrator. One function, numbered stages, each a small function elsewhere."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np

from recalld.providers.embedders import Embedder
from recalld.records import (
    ChannelHit,
    Hit,
    Memory,
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
from recalld.retrieval.candidates import needs_vectors, retrieve
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.dates import anchor_window
from recalld.retrieval.expand import expand
from recalld.retrieval.filters import dedupe, relevance_filter
from recalld.retrieval.fusion import Fused, RankedList, linear, rrf
from recalld.retrieval.headings import heading_lists
from recalld.retrieval.models import Models, StageNote
from recalld.retrieval.near_misses import near_misses as near_misses
from recalld.retrieval.promises import carried, keep_promises, promised_order
from recalld.retrieval.query import QueryPlan, understand
from recalld.retrieval.request import SearchRequest as SearchRequest, pool_size, sized_for
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
from recalld.stores.base import (
    CandidateRequest,
    ChannelCandidate,
    NearestAsk,
    SearchRows,
    Store,
)
from recalld.text import keywords, words
from recalld.threads import searching
from recalld.timing import StageClock, clocked


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
       queries that ask for advice, and neighbour evidence; last, the user's promises
       (:mod:`~recalld.retrieval.promises`: nothing forgotten, a superseded memory under
       what replaced it, which is brought in when missed);
    7. filter: dedup identical content, relevance threshold and score gap (exact lexical
       and entity hits are never dropped);
    8. assemble: MMR diversity, or session-diverse selection for aggregation queries;
    9. explain: traces are built from the numbers stages 3-7 recorded, and each stage's
       milliseconds (``details["stage_ms"]``, :mod:`recalld.timing`) are given (session
       neighbours, read and weighed, as ``neighbors`` apart from ``adjust``).
    """
    with searching(), clocked() as clock:
        return _search(store, embedder, request, config, now, models, clock)


def _search(
    store: Store,
    embedder: Embedder,
    request: SearchRequest,
    config: RetrievalConfig,
    now: datetime,
    models: Models | None,
    clock: StageClock,
) -> SearchResult:
    started = clock.began
    reference = request.as_of or now
    calibration = calibrate(embedder)
    plan = understand(request.query, request.mode, reference)
    plan = place_anchor(store, embedder, plan, request, config, calibration)
    clock.lap("understand")
    notes: list[StageNote] = []
    expanded = None
    if models is not None:
        if request.mode == "auto":
            mode, note = route(request.query, plan.mode, models, config.expansion.llm_routing)
            plan, notes = replace(plan, mode=mode), [note]
        expanded = expand(
            store, embedder, plan, request.filters, config, models, pool_size(request, config)
        )
        notes.append(expanded.note)
        clock.lap("expand")
    lists, rows, vector = retrieve(
        store, embedder, plan, request, config, expanded.query_vector if expanded else None
    )
    undated = window_unanswered(plan, lists, config) and not _dated(store, rows, lists)
    if undated:
        plan = replace(plan, time_window=None, terms=(*plan.terms, *plan.time_terms), time_terms=())
        lists, rows, vector = retrieve(
            store, embedder, plan, request, config, expanded.query_vector if expanded else None
        )
    lists += expanded.lists if expanded else ()
    clock.lap("candidates")
    lists, signal = trust_words(lists, config)
    pools = config.candidates
    keep = max(pools.min_adjust, sized_for(request, config) * pools.adjust_depth)
    fused = fuse(lists, config, keep)
    clock.lap("fuse")
    memories = _rows(store, rows, [f.memory_id for f in fused])
    clock.lap("rows")
    headed = heading_lists(fused, memories, lists, plan.text, embedder, config, vector)
    if headed.lists:
        lists = [*lists, *headed.lists]
        fused = fuse(lists, config, keep)  # the same candidates: heading lists add none
        clock.lap("headings")
    if models is not None:
        fused, note = rerank(fused, memories, request.query, plan.terms, models, config)
        notes.append(note)
        clock.lap("rerank")
    ctx = QueryContext(
        reference,
        request.project,
        wanted_role(request.query),
        plan.time_window,
        frozenset(words(request.query)),
        plan.advice,
        identifiers=identifiers(request.query),
    )
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
    aside = stood_aside(
        scored,
        plan,
        config,
        past=past,
        undated=undated,
        readable=readable,
        vectors_exact=store.exact_vectors(),
    )
    if headed.aside is not None:
        aside["heading_evidence"] = headed.aside
    scored = apply_session_support(scored, config)
    # each semantic candidate's query cosine (calibrated), for three stages
    cosines = _cosines(lists, calibration)
    if plan.advice:
        scored = topic_support(scored, cosines, config)
    clock.lap("adjust")
    if config.updates.kupdate_follow > 0 and not past:
        vectors.read(scored[: config.updates.kupdate_follow])
        scored = follow_updates(
            scored,
            vectors.found,
            store,
            request.filters,
            config,
            cosines,
            calibration,
            plan.terms,
            aside,
        )
        clock.lap("updates")
    if config.sessions.neighbor_weight > 0:
        top = [s.memory.id for s in scored[: config.sessions.neighbor_depth]]
        scored = neighbor_support(
            scored,
            _neighbors(store, rows, top, config.sessions.neighbor_radius),
            lambda ids: _rows(store, rows, ids),
            config,
            ctx.role if readable else "user",
        )
        clock.lap("neighbors")
    if not past:
        vectors.read(scored[: config.updates.kupdate_window])
    scored = knowledge_updates(
        scored, vectors.found, config, reference, not past, cosines, calibration, aside
    )
    promised = keep_promises(
        scored, lambda ids: _rows(store, rows, ids), request.filters, reference, config
    )
    ranked = scored = promised.scored
    clock.lap("updates")
    folded = 0
    if config.assembly.dedupe:
        scored, folded = dedupe(scored)
    kept, reasons = relevance_filter(scored, lists, config)
    clock.lap("filter")
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
        chosen = promised_order(chosen, ranked, promised.successors, request.limit)
        reasons.update(carried(chosen, reasons))
        hits = build_hits(chosen, lists, reasons if request.explain else None)
    missed = near_misses(ranked, chosen, reasons, request, config)
    clock.lap("assemble")
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
            **({"stage_ms": clock.rounded()} if request.explain else {}),
        },
        near_misses=tuple(
            replace(h, rank=len(hits) + h.rank)
            for h in build_hits(
                [m for m, _ in missed], lists, {m.memory.id: why for m, why in missed}
            )
        ),
    )


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
        and "temporal" in config.candidates.channels
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
    if config.sessions.reply_weight > 0 and not readable:
        aside["reply_support"] = (
            "the query's language gives no cue to whether it asks what the user said"
        )
    if plan.anchor is not None and plan.anchor_memory is None and config.time.anchor_events:
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
    if anchor is None or plan.time_window is not None or not config.time.anchor_events:
        return plan
    found = store.candidates(
        CandidateRequest(
            request.filters,
            {"semantic": NearestAsk(ANCHOR_PEERS, embedder.embed_query(anchor.text))},
        )
    ).get("semantic", [])
    if not found or calibration.query_lift(found[0].score) < config.time.anchor_min_score:
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


def trust_words(
    lists: list[RankedList], config: RetrievalConfig
) -> tuple[list[RankedList], dict[str, float] | None]:
    """Stage 3b, query-dependent channel trust (QMD's strong signal): when the BM25 list's
    top hit is clear (0-1 score at least ``strong_signal_score``, ahead of the second by
    ``strong_signal_gap``), that list weighs ``strong_signal_weight`` x as much, so a weak
    vector ranking does not outvote an exact word match. Returns the lists and the signal
    (None when it is not strong, or the weight is 1)."""
    if config.expansion.strong_signal_weight == 1.0:
        return lists, None
    for i, ranked in enumerate(lists):
        if ranked.name != "bm25" or not ranked.candidates:
            continue
        top = ranked.candidates[0].score
        gap = top - (ranked.candidates[1].score if len(ranked.candidates) > 1 else 0.0)
        if top < config.expansion.strong_signal_score or gap < config.expansion.strong_signal_gap:
            return lists, None
        trusted = replace(ranked, weight=ranked.weight * config.expansion.strong_signal_weight)
        return [*lists[:i], trusted, *lists[i + 1 :]], {"top": top, "gap": gap}
    return lists, None


def fuse(lists: list[RankedList], config: RetrievalConfig, keep: int) -> list[Fused]:
    """Stage 4: the first ``keep`` of the fused ranking."""
    settings = config.fusion
    if settings.method == "linear":
        weights = {"semantic": settings.vector_weight, "bm25": settings.text_weight}
        return linear(lists, {**settings.channel_weights, **weights})[:keep]
    return rrf(lists, settings.rrf_k, settings.rank_bonus_first, settings.rank_bonus_top3, keep)


def _cosines(lists: Sequence[RankedList], calibration: Calibration) -> dict[str, float]:
    """Each semantic candidate's similarity to the query, on the calibrated scale."""
    return {
        c.memory_id: calibration.query_lift(c.score)
        for ranked in lists
        if ranked.name == "semantic"
        for c in ranked.candidates
    }


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
        needed = needs_vectors(config, updates)
        self._allowed = (
            {s.memory.id for s in scored[: max(config.updates.kupdate_window, 100)]}
            if needed
            else set()
        )
        self._tried: set[str] = set()
        self.found: dict[str, np.ndarray] = {}

    def read(self, scored: Sequence[Scored]) -> None:
        """Read the vectors of these memories (of the allowed ones not read yet)."""
        ids = [
            s.memory.id
            for s in scored
            if s.memory.id in self._allowed and s.memory.id not in self._tried
        ]
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
        cosine_similarity(vectors)
        if config.assembly.mmr_similarity == "cosine"
        else jaccard_similarity()
    )
    if config.assembly.diverse_aggregation and plan.query_type == "aggregation":
        return session_diverse(scored, similarity, config.assembly.diversity_lambda, limit)
    if config.assembly.mmr_lambda < 1.0:
        return mmr(scored, similarity, config.assembly.mmr_lambda, limit)
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
                promises=item.promises,
                filters=(reasons.get(item.memory.id, "kept"),),
                final_score=item.score,
            )
        hits.append(Hit(item.memory, item.score, rank, trace))
    return hits


def _place(name: str, cand: ChannelCandidate) -> ChannelHit:
    return ChannelHit(name, cand.rank, cand.score)
