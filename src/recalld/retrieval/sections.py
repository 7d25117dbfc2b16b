"""The retrieval settings in sections, one frozen object per stage of the pipeline, every
setting named with its reason.

:class:`recalld.retrieval.config.RetrievalConfig` holds one of each;
:data:`recalld.retrieval.config.FLAT` maps each flat name (``rrf_k``) to its section. A
section checks its own values when it is made, so a bad value is refused wherever it comes
from (a keyword, ``recalld bench --set``, a preset).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from recalld.errors import InvalidInputError

LISTS = ("semantic", "bm25", "entity", "temporal")
"""The ranked lists fusion reads, in this order (a list's weight and trace follow it): the
names ``channels`` and ``channel_weights`` take. Every retrieval channel feeds one of them
(:data:`recalld.retrieval.channels.CHANNELS`)."""


def _frozen(mapping: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(mapping))


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidInputError(message)


@dataclass(frozen=True)
class CandidateSettings:
    """What each channel proposes, and how many fused candidates go on to be scored."""

    candidate_multiplier: int = 4
    """Each channel proposes ``limit x candidate_multiplier`` candidates (OpenClaw's 4)."""
    min_candidates: int = 40
    """Floor on the per-channel pool, so small limits still see enough candidates."""
    adjust_depth: int = 2
    """Only the top ``limit x adjust_depth`` fused candidates (at least ``min_adjust``) are
    loaded, adjusted and filtered: deeper ones cannot plausibly reach the results, and
    loading them is most of a search's cost. 2 and 3 measured the same on LongMemEval and
    LoCoMo at 50 hits a search; 1 lost 0.3 points of LoCoMo evidence@10."""
    min_adjust: int = 60
    """The fewest fused candidates adjusted, however small the limit (with ``adjust_depth``)."""
    stable_limit: int = 50
    """Pools (per channel, and of the candidates adjusted) are sized for this many results
    whatever smaller ``limit`` a search asks for, so the top k of a search is the first k
    of any larger one up to this limit: an agent that asks for more results gets the same
    best answers, then more. Past it, the pools grow with the limit."""
    channels: tuple[str, ...] = ("semantic", "bm25", "temporal")
    """Channels run in hybrid mode; vector mode runs ``semantic`` alone. The ``entity``
    channel is available but not a default: with the offline extractor it cost 2-7 points
    of R@1 on LongMemEval_S and LoCoMo (docs/benchmarks.md, ablations)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", tuple(self.channels))
        _check(
            self.candidate_multiplier >= 1 and self.stable_limit >= 1,
            "candidate_multiplier and stable_limit must be >= 1",
        )
        unknown = set(self.channels) - set(LISTS)
        _check(not unknown, f"unknown channel(s): {', '.join(sorted(unknown))}")


@dataclass(frozen=True)
class FusionSettings:
    """How the channels' ranked lists become one."""

    method: str = "rrf"
    """``rrf`` (weighted reciprocal rank fusion) or ``linear`` (OpenClaw's weighted merge);
    its flat name is ``fusion`` (``with_changes(fusion="linear")``)."""
    rrf_k: int = 60
    """RRF constant: the standard value from the literature (CEMS, QMD, Unforget)."""
    channel_weights: Mapping[str, float] = field(
        default_factory=lambda: _frozen(
            {"semantic": 1.0, "bm25": 1.0, "entity": 0.6, "temporal": 0.2}
        )
    )
    """Per-channel RRF weights (Unforget's "personal assistant" profile, temporal lowered).
    BM25 at 1.5 gained 1 point on LoCoMo but lost 7 of R@1 on LongMemEval_S: kept at 1.0."""
    time_terms_weight: float = 0.3
    """RRF weight of a second BM25 list for the query's time words ("January", "Friday"),
    which the main BM25 list leaves to the time window: "what did we ship in January?"
    still finds the note that says January. 0 turns it off."""
    original_query_weight: float = 2.0
    """Lists from the user's own query count double against expansions (QMD)."""
    rank_bonus_first: float = 0.05
    """Added to a memory ranked first in any original-query list (QMD's top-rank guard)."""
    rank_bonus_top3: float = 0.02
    """Added to a memory ranked second or third in any original-query list."""
    heading_weight: float = 0.5
    """RRF weight of each of the two heading lists (by words, by meaning) that rank chunks
    of indexed files by their heading path (:mod:`recalld.retrieval.headings`); 0 turns
    them off. Applies only where the top candidates are all file chunks. Measured
    (2026-11-28, section hit@1): helix 0.608 -> 0.658 (5 won, 1 lost), recalld's own docs
    0.500 -> 0.643 (2 won, 0 lost); 0.25 and 1.0 measured within a question of 0.5 on both."""
    heading_depth: int = 20
    """How many top fused candidates the heading lists rank (10 to 30 measured alike)."""
    vector_weight: float = 0.7
    """Linear fusion: weight of the vector score (OpenClaw)."""
    text_weight: float = 0.3
    """Linear fusion: weight of the BM25 score (OpenClaw)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "channel_weights", _frozen(self.channel_weights))
        _check(
            self.method in ("rrf", "linear"),
            f"fusion must be 'rrf' or 'linear', not {self.method!r}",
        )
        _check(self.rrf_k >= 1, "rrf_k must be >= 1")
        _check(
            self.heading_weight >= 0 and self.heading_depth >= 1,
            "heading_weight must be >= 0 and heading_depth >= 1",
        )


@dataclass(frozen=True)
class MemorySettings:
    """Factors a memory carries whatever the query: its priority, pin, project, type and use."""

    use_priority: bool = True
    """Multiply by the memory's priority (1.0-2.0)."""
    pinned_boost: float = 1.1
    """Pinned memories x1.1 (CEMS)."""
    project_boost: float = 2.0
    project_penalty: float = 0.5
    no_project_penalty: float = 0.9
    """With a project given: same project x2, another named project x0.5, none x0.9. CEMS
    uses x1.3 / x0.8; on workloads dev (coding agents asking within a project) the stronger
    pair puts the project's own answer in the top 5 on 4 more queries and loses none, flat
    from x2 / x0.5 to x3 / x0.33. A memory with no project (a general note) keeps x0.9."""
    type_boosts: Mapping[str, float] = field(
        default_factory=lambda: _frozen(
            {"insight": 1.0, "event": 1.0, "raw": 1.0, "turn": 1.0, "chunk": 1.0}
        )
    )
    """Per-type factors, neutral by default. Unforget's (insight 1.2, raw 0.5) measured no
    net gain on any dev set (workloads hit@1 1 won / 0 lost, mrr@10 1 won / 4 lost; no
    change on LongMemEval_S or LoCoMo), so they are not a default; set them for a store
    whose types mean that."""
    significance_weight: float = 0.0
    """Factor ``1 + w * (significance - 0.5)``; 0 turns it off."""
    reinforcement_weight: float = 0.0
    """Factor ``1 + w * log2(1 + access_count)`` (MemU); 0 turns it off."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_boosts", _frozen(self.type_boosts))


@dataclass(frozen=True)
class TimeSettings:
    """Time: decay with age, the query's time window, its ends of time and events."""

    decay: str = "exponential"
    """``hyperbolic`` (CEMS ``1/(1+days/half_life)``), ``exponential`` (OpenClaw) or ``none``."""
    half_life_days: float = 365.0
    """Hyperbolic decay half-life (CEMS: 60 days); exponential uses it as the half-life too."""
    decay_turns: bool = False
    """Whether conversation turns decay too (notes, facts and documents do, unless pinned or
    evergreen). Off: on LoCoMo, whose questions ask about any moment of a long
    conversation, decaying turns cost 4.3 points of turn R@10."""
    window_boost: float = 1.3
    """Memories inside the time window the query names score this much more."""
    order_weight: float = 0.0
    """For a query about an end of time ("the first time", "most recently"), memories gain
    up to this share by their place in time among the top ``order_depth`` candidates
    (the oldest or the newest gains all of it); 0 turns it off."""
    order_depth: int = 30
    """How many top candidates are placed in time for ``order_weight``."""
    anchor_events: bool = False
    """Resolve "before/after/since <event>" by finding the event's time with a small search
    and using it as the query's time window (when the query names no time itself, and the
    memories carry times of their own). Off by default: it moved no workloads or
    LongMemEval_S question and one LoCoMo question each way (2026-11-26)."""
    anchor_min_score: float = 0.48
    """The event's best match must reach this similarity to the event's words to be trusted
    as its time. Like every similarity threshold here it is on the embedder's calibrated
    scale (:mod:`recalld.retrieval.calibration`: 0 = what unrelated texts score with this
    model, 1 = identical), so it means the same with any embedder; with the packaged
    MiniLM (chance cosine ~0.035) 0.48 is a cosine of 0.5."""

    def __post_init__(self) -> None:
        _check(self.decay in ("none", "hyperbolic", "exponential"), f"unknown decay {self.decay!r}")


@dataclass(frozen=True)
class StatementSettings:
    """What a memory states and who states it, against what the query asks."""

    role_boost: float = 1.3
    """Turns spoken by the role the query is about (the user, unless it asks what the
    assistant said) score this much more; 1.0 turns it off. Measured: +7 points R@1 on
    LongMemEval_S (at 1.2); 1.3-1.4 then gained one synth question at R@1, 1.5 and more
    lost one on LongMemEval_S; no effect where turns carry no role."""
    speaker_boost: float = 1.5
    """Turns spoken by a person the query names (``metadata["speaker"]``, or a ``role``
    that is a name) score this much more; 1.0 turns it off. Measured on LoCoMo: turn
    R@1 0.266 -> 0.377, R@10 0.750 -> 0.764, evidence@10 0.684 -> 0.695 (2.0 did less
    well); no effect on LongMemEval, whose roles are user and assistant. A speaker is
    named by their full name, their first name, or the organisation in brackets after it
    ("Karin Vos (Pinecrest Outfitters)"): on workloads dev +1 hit@1, +1 hit@5, none lost."""
    identifier_boost: float = 2.0
    """Memories that contain an identifier the query names (a token with letters and
    digits: ``CC-1043``, ``INC0048213``, ``BME280``), and the other memories of their
    sessions (the ticket's thread), score this much more; 1.0 turns it off. Measured on
    workloads dev: 5 queries rank their answer higher (hit@5 +1), none lower; 1.5 did
    the same, memory-only (no thread) moved 3 up and 1 down."""
    event_boost: float = 1.3
    """Memories that tell of something that happened to their speaker ("I visited the Met
    today", "we adopted a puppy last week") score this much more; 1.0 turns it off. Such
    turns are 5x as common among LongMemEval_S's evidence turns as among its other user
    turns (3.5x on the synth file, 3x on LoCoMo). Measured (1.2 / 1.3): LongMemEval_S
    recall_all@10 0.966 -> 1.000; synth R@1 0.912 -> 0.947; LoCoMo turn R@1 0.372 ->
    0.388 / 0.391, R@10 0.776 -> 0.777 / 0.787, evidence@10 0.708 -> 0.710 / 0.719; 1.5
    lost two synth questions at R@1."""
    asks_penalty: float = 0.6
    """Memories that only ask ("Which gyms are open late?": a question that tells of no
    event and says nothing of its speaker, :func:`recalld.text.only_asks`) score this much;
    1.0 turns it off. A question cannot state the fact another question asks for: such
    turns are 1.4% of LongMemEval_S's evidence turns against 21.5% of its other turns (2.8%
    / 21.8% on synth, 5.7% / 24.2% on LoCoMo). Queries that ask for advice are exempt: the
    user's own requests show what they are after. Measured (0.6): LongMemEval_S R@1 0.897
    -> 0.931, LoCoMo turn R@1 0.394 -> 0.413, R@10 0.785 -> 0.793; synth R@1 unchanged.
    0.4-0.7 won the same LongMemEval_S question, 0.8 did not."""

    def __post_init__(self) -> None:
        _check(0.0 < self.asks_penalty <= 1.0, "asks_penalty must be above 0 and at most 1")


@dataclass(frozen=True)
class UpdateSettings:
    """Knowledge updates we infer: a newer statement of the same fact ranks first."""

    kupdate_factor: float = 0.4
    """Knowledge updates: of two statements of the same fact, the older scores this much
    (x) so the newer value ranks first; 1.0 turns the detection off. Only between
    statements that can replace each other (:mod:`recalld.retrieval.replacement`: never the
    chunks of one file, never ordered by ingestion alone)."""
    kupdate_similarity: float = 0.845
    """Calibrated similarity at or above which two statements count as saying the same
    thing (a note or a fact restated later is its newer version; a conversation turn that
    repeats an older one retells or confirms it, and supersedes nothing by that alone).
    With the packaged MiniLM: a cosine of 0.85."""
    kupdate_change_similarity: float = 0.48
    """Calibrated similarity at or above which a newer memory that says something changed
    ("moved to", "now", "rebooked") and gives the new value (a number, a date; not a version
    number) supersedes an older one on the same subject (MiniLM: a cosine of 0.5)."""
    kupdate_related_similarity: float = 0.33
    """A newer memory that says something changed and is at least this close to an older
    one (calibrated; MiniLM: a cosine of 0.35) supersedes it when it also answers the
    query about as well (``kupdate_query_ratio``)."""
    kupdate_query_ratio: float = 0.9
    """... its calibrated query similarity at least this share of the older memory's."""
    kupdate_window: int = 30
    """How many top candidates are compared pairwise for knowledge updates."""
    kupdate_follow: int = 1
    """How many top hits look for a newer memory that replaces them, outside the
    candidates: a vector search with the hit's own vector, ``kupdate_follow_pool`` deep.
    A memory found that says the hit's fact changed and gives the new value (a number, a
    date; not a version number) scores at least as much as the hit, and knowledge updates
    then put it first, provided it has evidence of its own for the query (a candidate, or
    one of the query's words). An update often shares few words with the question. 0 turns
    it off."""
    kupdate_follow_pool: int = 10
    """How many memories near each such hit are examined."""
    kupdate_exchange_minutes: float = 10.0
    """Two turns of one session by two speakers, stated at most this many minutes apart,
    are one exchange: a statement and the reply that confirms it ("the standup moves to 9:30" /
    "Noted: standup at 9:30 from Monday"). A newer memory that replaces one turn of an
    exchange replaces the other too, when the two are related
    (``kupdate_related_similarity``): the change is often close to the acknowledgement and
    far from the statement it acknowledges. And a change is not replaced by the reply that
    confirms it ("the dentist on the 4th is cancelled, new date the 25th" / "Changed: the
    25th"). :mod:`recalld.retrieval.exchanges`; 0 turns it off. A reply in a chat comes
    within minutes; one in a thread of emails may come the next day, and is then as often
    a change of its own as a confirmation. Measured on the workloads dev set (2026-11-28):
    hit@1 0.689 -> 0.707 (3 won, 0 lost), current_first 0.829 -> 0.914; no LongMemEval_S,
    LoCoMo or helix query moved at rank 1; 3 and 30 minutes measured the same, 4 hours lost
    a query. With multilingual-e5-small, whose pairwise
    similarities already catch those changes, no query moved at hit@1 (two lower at
    mrr@10)."""
    kupdate_thread_subject: bool = False
    """A newer turn of the same session (a ticket's or an order's thread of messages) that
    says something changed and gives the new value is on the subject of an older turn of
    that session it is related to (``kupdate_related_similarity``), without the query test
    of ``kupdate_query_ratio``: a thread is about one matter. Off: on the workloads dev set
    it moved current_first (one query) and mrr@10 (2 won, 0 lost) but no query at rank 1
    (2026-11-28)."""

    def __post_init__(self) -> None:
        _check(
            self.kupdate_follow >= 0 and self.kupdate_follow_pool >= 1,
            "kupdate_follow must be >= 0 and kupdate_follow_pool >= 1",
        )
        _check(self.kupdate_exchange_minutes >= 0, "kupdate_exchange_minutes must be >= 0")

    @property
    def exchange_span(self) -> timedelta:
        """``kupdate_exchange_minutes`` as a span of time."""
        return timedelta(minutes=self.kupdate_exchange_minutes)


@dataclass(frozen=True)
class PromiseSettings:
    """What a user stated: a memory marked superseded (replaced, or past its ``valid_until``)."""

    superseded_factor: float = 0.5
    """Memories marked superseded (``MemoryEngine.supersede``: replaced by another, or past
    their ``valid_until``) score this much (x)."""
    superseded: str = "demote"
    """``demote`` (score ``superseded_factor``) or ``hide`` (left out of search results)
    for memories marked superseded."""

    def __post_init__(self) -> None:
        _check(self.superseded in ("demote", "hide"), "superseded must be 'demote' or 'hide'")


@dataclass(frozen=True)
class SessionSettings:
    """Evidence from a memory's session: its support, its topic, neighbouring turns, replies."""

    session_boost: float = 0.5
    """Turns gain this share of their session's support (normalised by the best session);
    0 turns session evidence off. Measured: +3 points R@1 on LongMemEval_S, +1.6 R@10 on
    LoCoMo (at 0.3); with ``neighbor_weight`` 0.3, any value from 0.4 to 0.6 measured the
    same within a question."""
    session_support: float = 0.5
    """A session's support is its best turn's score plus this share of its next best turns."""
    session_support_turns: int = 3
    """How many further turns count towards a session's support."""
    topic_weight: float = 1.0
    """For a query that asks for advice ("any tips?", ``QueryPlan.advice``), sessions are
    ranked by how close their best ``topic_turns`` turns are to the query (cosine), and a
    turn in the k-th session scores x(1 + topic_weight / k); 0 turns it off. What answers
    such a query is the conversation in which the user talked about the matter at length,
    not one turn that shares the request's words. Measured: LongMemEval_S R@1 0.862 ->
    0.897, synth single-session-preference R@5 0.833 -> 1.000, the same from 0.75 to 1.5;
    0.5 won nothing. No LoCoMo question asks for advice (docs/benchmarks.md, 2026-11-24)."""
    topic_turns: int = 2
    """How many of a session's closest turns make its topic score (2 and 3 measured alike;
    4 lost a LongMemEval_S question)."""
    neighbor_weight: float = 0.3
    """A turn adjacent to a strong hit in the same session gains this share of its score
    (halved per further step); 0 turns it off. Measured: +5.5 points turn R@10 on LoCoMo,
    +3 points session R@1 on LongMemEval_S (at 0.5). 0.3 then gained 1.2 points of turn
    R@10 and evidence@10 on LoCoMo at no cost on LongMemEval (0.2-0.3 measured alike);
    0.7 lost 2 points."""
    answer_weight: float = 0.8
    """The turn right after a turn that only asks (a question, ``asks_penalty``) gains this
    share of the question's score before the penalty: the reply holds the answer."""
    reply_weight: float = 0.8
    """The reply to a turn of the user's that matched (a report of an error, a request, a
    question without "?") gains this share of that turn's score, when the query does not
    ask what the user said and the reply is another speaker's; 0 turns it off. Measured
    (0.8 / 0.5): workloads hit@1 0.647 -> 0.695 / 0.671 (11 won / 3 lost at 0.8); no
    LongMemEval_S, LoCoMo (turns named by speaker, not role) or SciFact query moved."""
    neighbor_radius: int = 1
    """How many turns either side of a hit receive neighbour support."""
    neighbor_depth: int = 20
    """How many top hits lend support to their neighbours."""

    def __post_init__(self) -> None:
        _check(
            self.topic_weight >= 0 and self.topic_turns >= 1,
            "topic_weight must be >= 0 and topic_turns >= 1",
        )


@dataclass(frozen=True)
class AssemblySettings:
    """Filters and the assembly of results: cut-offs, duplicates, diversity, the context budget."""

    min_score: float = 0.0
    """Hits whose final score falls below this share of the top score are dropped
    (never an exact lexical or entity hit)."""
    max_gap: float = 0.0
    """Cut the list where a score falls by more than this share from the one before it
    (0 turns it off; protected hits survive)."""
    protect_top: int = 3
    """Hits in the top this-many of the BM25 or entity list are never filtered out."""
    dedupe: bool = True
    """Fold memories with identical content into the best-scored one."""
    mmr_lambda: float = 1.0
    """MMR trade-off for search results (1.0 = pure relevance, no diversity)."""
    mmr_similarity: str = "cosine"
    """``cosine`` (memory vectors) or ``jaccard`` (keyword overlap, OpenClaw)."""
    diverse_aggregation: bool = False
    """For aggregation queries, pick the best hit of each session first (CEMS two-phase)."""
    diversity_lambda: float = 0.6
    """MMR lambda of the session-diverse selection (CEMS: 0.6)."""
    max_tokens: int = 2000
    """Default token budget of :meth:`MemoryEngine.context` (CEMS)."""

    def __post_init__(self) -> None:
        _check(
            self.mmr_similarity in ("cosine", "jaccard"),
            "mmr_similarity must be 'cosine' or 'jaccard'",
        )
        _check(
            0.0 <= self.mmr_lambda <= 1.0 and 0.0 <= self.diversity_lambda <= 1.0,
            "MMR lambdas must be between 0 and 1",
        )


@dataclass(frozen=True)
class ExpansionSettings:
    """Query expansion and routing by the configured LLM (only with ``llm`` set), and the
    strong-signal probe of the BM25 list, which also weighs that list without an LLM."""

    expand: bool = True
    """Stage 2: expand queries with the configured LLM (typed lex / vec / hyde lines)."""
    llm_routing: bool = True
    """``auto`` mode asks the configured LLM how complex the query is (CEMS): simple ->
    vector, complex / reasoning / more than two domains -> hybrid."""
    expansion_weight: float = 1.0
    """RRF weight of an expansion's list; the original query's lists weigh
    ``original_query_weight`` (2.0), so the user's own words count double (QMD)."""
    strong_signal_score: float = 0.85
    """Expansion is skipped when the BM25 top hit's 0-1 score (``|bm25| / (1 + |bm25|)``)
    reaches this (QMD's strong-signal probe) ..."""
    strong_signal_gap: float = 0.15
    """... and leads the second hit by at least this much."""
    strong_signal_weight: float = 1.0
    """With no LLM too: a BM25 list whose top hit is strong and clear (the two settings
    above) weighs this much more in fusion for that query; 1.0 turns it off."""

    def __post_init__(self) -> None:
        _check(self.expansion_weight >= 0, "expansion_weight must be >= 0")


@dataclass(frozen=True)
class RerankSettings:
    """Stage 5, the reranker (only with ``reranker`` set), and its blend with the fused order."""

    rerank_depth: int = 40
    """Stage 5 scores only the top this-many fused candidates (QMD: 30-40): deeper ones
    rarely reach the results, and each costs the reranker a passage."""
    rerank_chunk_words: int = 200
    """A memory longer than this many words is represented by its window of this size with
    the most query-term hits (the reranker's input window is ~256-512 tokens)."""
    rerank_weight_top3: float = 0.75
    """Share of the retrieval position (``1 / position``) in the blend at fused positions
    1-3; the reranker's score gets the rest (QMD: trust the top of a good fusion) ..."""
    rerank_weight_top10: float = 0.60
    """... at positions 4-10 ..."""
    rerank_weight_rest: float = 0.40
    """... and from position 11 on."""

    def __post_init__(self) -> None:
        blend = (self.rerank_weight_top3, self.rerank_weight_top10, self.rerank_weight_rest)
        _check(all(0.0 <= w <= 1.0 for w in blend), "rerank blend weights must be between 0 and 1")
        _check(
            self.rerank_depth >= 0 and self.rerank_chunk_words >= 1,
            "rerank_depth must be >= 0 and rerank_chunk_words >= 1",
        )
