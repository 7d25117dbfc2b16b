"""Score adjustments: each a named multiplicative factor recorded in the trace."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from recalld.records import Memory, TimeRange, frozen_made
from recalld.retrieval.calibration import UNCALIBRATED, Calibration
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.exchanges import confirmed_changes, shared_by_exchange
from recalld.retrieval.fusion import Fused
from recalld.retrieval.replacement import gives_new_value, in_order
from recalld.text import gives_new_value as names_any_value, only_asks, states_event, words


@dataclass(frozen=True)
class Scored:
    """A fused candidate with its memory, its adjustment factors and its final score."""

    memory: Memory
    fused: Fused
    score: float
    factors: Mapping[str, float] = field(default_factory=dict)
    promises: tuple[str, ...] = ()
    """What the user's own statements did to it (:mod:`recalld.retrieval.promises`)."""


def make_scored(memory: Memory, fused: Fused, score: float, factors: Mapping[str, float]) -> Scored:
    """A :class:`Scored` made by :func:`~recalld.records.frozen_made` (no promises yet):
    the stages remake every candidate several times a search."""
    return frozen_made(
        Scored, memory=memory, fused=fused, score=score, factors=factors, promises=()
    )


def decay_factor(memory: Memory, now: datetime, config: RetrievalConfig) -> float:
    """Time decay by age of the memory's reference time; pinned and evergreen are exempt."""
    if config.time.decay == "none" or memory.pinned or memory.evergreen:
        return 1.0
    if not config.time.decay_turns and is_turn(memory):
        return 1.0
    days = max(0.0, (now - memory.reference_time).total_seconds() / 86400)
    if config.time.decay == "hyperbolic":
        return 1.0 / (1.0 + days / config.time.half_life_days)
    return float(0.5 ** (days / config.time.half_life_days))


def project_factor(memory: Memory, project: str | None, config: RetrievalConfig) -> float:
    if project is None:
        return 1.0
    if memory.project == project:
        return config.memory.project_boost
    return config.memory.project_penalty if memory.project else config.memory.no_project_penalty


_ABOUT_ASSISTANT = re.compile(
    r"\byou\s+(?:said|told|mentioned|suggested|recommended|gave|provided|listed|wrote|"
    r"explained|shared|described)\b|\bdid\s+you\s+(?:say|tell|mention|suggest|recommend|"
    r"give|provide|list|write|explain|share|describe)\b|\byour\s+(?:suggestion|"
    r"recommendation|answer|advice|list|explanation)\b|\b(?:remind me (?:what|of) (?:you|the))\b",
    re.IGNORECASE,
)
"""Questions about what the assistant said before. A request ("can you suggest a hotel?")
is not one: it asks for something new, which the user's own turns inform."""


_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b", re.IGNORECASE)
"""A question in the first person singular is about the person asking ("where did I ...")."""


_ENGLISH_CUES = re.compile(
    r"\b(?:what|when|where|who|which|how|why|did|does|do|is|are|were|the|an|we|you|our|"
    r"us|my|can|should)\b",
    re.IGNORECASE,
)
"""Common English words that other languages do not spell alike ("was", "a", "i" and "me"
are German, Spanish or Italian words too): a query with none of them is in another
language, whose cues to whom it is about (:func:`wanted_role`) this module does not read."""


def role_readable(query: str) -> bool:
    """Whether :func:`wanted_role` can read ``query`` (its role cues are English): a query in
    Japanese may ask what the user did without a pronoun at all."""
    return _ENGLISH_CUES.search(query) is not None


def wanted_role(query: str) -> str | None:
    """``assistant`` when the query asks what the assistant said; ``user`` when it asks about
    the asker in the first person ("what degree did I get?"): a personal memory question is
    about what the user told, not what was answered. Otherwise (``how did we fix X``) no
    role: in a team's or a coding agent's store the answer is as often a reply."""
    if _ABOUT_ASSISTANT.search(query):
        return "assistant"
    return "user" if _FIRST_PERSON.search(query) else None


@dataclass(frozen=True)
class QueryContext:
    """What the adjustments need to know about the query."""

    now: datetime
    project: str | None = None
    role: str | None = None
    window: TimeRange | None = None
    query_words: frozenset[str] = frozenset()
    """The query's lower-cased words, for matching the names of speakers."""
    advice: bool = False
    """The query asks for advice (``QueryPlan.advice``)."""
    decay_from: datetime | None = None
    """The moment age is counted from (default ``now``): see :func:`adjust`."""
    identifiers: tuple[str, ...] = ()
    """The identifiers the query names (:func:`identifiers`), lower-cased."""
    identified: Mapping[str, float] = field(default_factory=dict)
    """Thread (session, or a memory of its own) -> identifier factor, for the threads with a
    candidate that contains one of ``identifiers``: their other memories are about the
    identified thing too (see :func:`identifier_factor`)."""


def role_factor(memory: Memory, role: str | None, config: RetrievalConfig) -> float:
    speaker = memory.metadata.get("role")
    if role is None or speaker is None or config.statements.role_boost == 1.0:
        return 1.0
    return config.statements.role_boost if speaker == role else 1.0


def speaker_of(memory: Memory) -> str | None:
    """Who said a memory: ``metadata["speaker"]``, else a ``role`` that is a name (not
    ``user`` / ``assistant`` / ``system``)."""
    speaker = memory.metadata.get("speaker") or memory.metadata.get("role")
    if not isinstance(speaker, str) or speaker.lower() in GENERIC_ROLES:
        return None
    return speaker


GENERIC_ROLES = frozenset({"user", "assistant", "system", "tool", "human", "ai", "speaker"})


def is_turn(memory: Memory) -> bool:
    """Whether a memory is something a person said in a conversation: a ``turn``, or any
    memory that names who spoke it (``role`` or ``speaker``). The conversation priors
    (events told, questions that only ask) hold for these and not for notes or documents,
    where "we found" opens a paper's result rather than telling what happened."""
    return memory.type == "turn" or bool(
        memory.metadata.get("role") or memory.metadata.get("speaker")
    )


def event_factor(memory: Memory, config: RetrievalConfig) -> float:
    """Turns that tell of an event score ``event_boost`` more: what people ask of their
    memory is mostly what happened (what they did, got, saw), and a turn that says so is
    more often the answer than one that asks or advises."""
    if config.statements.event_boost == 1.0 or not is_turn(memory):
        return 1.0
    tells = memory.tells_event
    if tells is None:  # a memory that was not read from a store
        tells = states_event(memory.content)
    return config.statements.event_boost if tells else 1.0


def asks_factor(memory: Memory, advice: bool, config: RetrievalConfig) -> float:
    """Memories that only ask score ``asks_penalty``: a question does not state the fact
    another question is after. Not for a query that asks for advice, whose answer is what
    the user asked for before."""
    if config.statements.asks_penalty == 1.0 or advice or not is_turn(memory):
        return 1.0
    return config.statements.asks_penalty if only_asks(memory.content, memory.tells_event) else 1.0


def speaker_factor(memory: Memory, query_words: frozenset[str], config: RetrievalConfig) -> float:
    """A question that names a person ("where has Melanie camped?") is mostly answered by
    what that person said: their turns score ``speaker_boost`` more."""
    speaker = speaker_of(memory)
    if speaker is None or config.statements.speaker_boost == 1.0 or not query_words:
        return 1.0
    names = speaker_names(speaker)
    return (
        config.statements.speaker_boost
        if any(n and all(w in query_words for w in n) for n in names)
        else 1.0
    )


def speaker_names(speaker: str) -> list[list[str]]:
    """The ways a query may name ``speaker``, each a list of words that must all be in it:
    ``Karin Vos (Pinecrest Outfitters)`` is named by "Karin Vos", by "Karin" (people are
    mostly asked about by first name) or by "Pinecrest Outfitters" (the organisation they
    speak for)."""
    main, _, rest = speaker.partition("(")
    person = words(main)
    out = [person, person[:1]] if len(person) > 1 else [person]
    if rest:
        out.append(words(rest.rstrip(") ")))
    return out


_IDENTIFIER = re.compile(r"(?<![\w-])[^\W_](?:[\w./-]*[^\W_])?(?![\w-])")
_MEASURE = re.compile(r"\d+(?:st|nd|rd|th|am|pm|s|h|m|k|x)", re.IGNORECASE)


def identifiers(query: str) -> tuple[str, ...]:
    """The identifiers ``query`` names, lower-cased: tokens of three or more characters
    with both letters and digits (``CC-1043``, ``INC0048213``, ``BME280``, ``dada2_filter``),
    not an ordinal, a time or a plain count with a unit (``40th``, ``3pm``, ``10k``)."""
    found = []
    for token in _IDENTIFIER.findall(query):
        if (
            len(token) >= 3
            and any(c.isdigit() for c in token)
            and any(c.isalpha() for c in token)
            and not _MEASURE.fullmatch(token)
        ):
            found.append(token.lower())
    return tuple(dict.fromkeys(found))


def identifier_factor(memory: Memory, ctx: QueryContext, config: RetrievalConfig) -> float:
    """A memory that contains an identifier the query names, or is in a session (a ticket's
    thread, a conversation) where a candidate does, scores more: an order, ticket or error
    code picks out its own thread exactly, where the words around it ("the cake on order
    ...") match every order alike; and the thread's later messages ("switched to lemon
    drizzle") often answer without repeating the code.

    Premise: the identifier is rare, so that it picks out one thread. The lift is
    ``identifier_boost`` shared among the threads among the candidates that name it
    (:func:`identified_threads`): a ticket number in one thread lifts it fully, a gene
    name in twenty abstracts lifts each by a twentieth, which ranks nothing."""
    if not ctx.identifiers or config.statements.identifier_boost == 1.0:
        return 1.0
    return ctx.identified.get(thread_of(memory), 1.0)


def thread_of(memory: Memory) -> str:
    """The thread a memory belongs to: its session, else itself."""
    return memory.session_id if memory.session_id is not None else f"memory:{memory.id}"


def identified_threads(
    memories: Iterable[Memory], names: tuple[str, ...], boost: float
) -> dict[str, float]:
    """Thread -> ``1 + (boost - 1) / n`` for each thread with a memory that names one of
    ``names``, where ``n`` is how many threads name that identifier (the rarest one it
    names counts)."""
    naming: dict[str, set[str]] = {}
    for memory in memories:
        for name in names:
            if names_identifier(memory, (name,)):
                naming.setdefault(name, set()).add(thread_of(memory))
    factors: dict[str, float] = {}
    for threads in naming.values():
        factor = 1.0 + (boost - 1.0) / len(threads)
        for thread in threads:
            factors[thread] = max(factors.get(thread, 1.0), factor)
    return factors


def names_identifier(memory: Memory, names: tuple[str, ...]) -> bool:
    """Whether ``memory`` contains one of the identifiers ``names`` as a whole token (the
    token bounds of :func:`identifiers`)."""
    text = memory.content.lower()
    return any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text) for n in names)


def window_factor(memory: Memory, window: TimeRange | None, config: RetrievalConfig) -> float:
    if window is None:
        return 1.0
    return config.time.window_boost if window.contains(memory.reference_time) else 1.0


def factors_for(memory: Memory, ctx: QueryContext, config: RetrievalConfig) -> dict[str, float]:
    """Every factor that is not 1.0, by name (in one fixed order, so that their product
    is the same number every time). A factor this query and configuration cannot move
    (its boost 1.0, no project asked for, no time window ...) is not computed: this runs
    for every candidate of every search."""
    factors: dict[str, float] = {}
    _memory_factors(memory, ctx, config, factors)
    _query_factors(memory, ctx, config, factors)
    return factors


def _memory_factors(
    memory: Memory, ctx: QueryContext, config: RetrievalConfig, out: dict[str, float]
) -> None:
    """The factors of the memory's own fields: age, priority, pin, project, type,
    significance, reinforcement."""
    if config.time.decay != "none":
        _put(out, "decay", decay_factor(memory, ctx.decay_from or ctx.now, config))
    if config.memory.use_priority:
        _put(out, "priority", memory.priority)
    if memory.pinned:
        _put(out, "pinned", config.memory.pinned_boost)
    if ctx.project is not None:
        _put(out, "project", project_factor(memory, ctx.project, config))
    if config.memory.type_boosts:
        _put(out, "type", config.memory.type_boosts.get(memory.type, 1.0))
    if config.memory.significance_weight:
        _put(
            out,
            "significance",
            1.0 + config.memory.significance_weight * (memory.significance - 0.5),
        )
    if config.memory.reinforcement_weight and memory.access_count:
        _put(
            out,
            "reinforcement",
            1.0 + config.memory.reinforcement_weight * math.log2(1 + memory.access_count),
        )


def _query_factors(
    memory: Memory, ctx: QueryContext, config: RetrievalConfig, out: dict[str, float]
) -> None:
    """The factors of what the query asks: role, speaker, identifier, time window, and the
    conversation priors (events told, questions that only ask)."""
    if ctx.role is not None:
        _put(out, "role", role_factor(memory, ctx.role, config))
    if ctx.query_words and config.statements.speaker_boost != 1.0:
        _put(out, "speaker", speaker_factor(memory, ctx.query_words, config))
    if ctx.identifiers:
        _put(out, "identifier", identifier_factor(memory, ctx, config))
    if ctx.window is not None:
        _put(out, "time_window", window_factor(memory, ctx.window, config))
    if config.statements.event_boost != 1.0:
        _put(out, "event_statement", event_factor(memory, config))
    if config.statements.asks_penalty != 1.0 and not ctx.advice:
        _put(out, "only_asks", asks_factor(memory, ctx.advice, config))


def _put(out: dict[str, float], name: str, value: float) -> None:
    if value != 1.0:
        out[name] = value


def adjust(
    fused: list[Fused],
    memories: Mapping[str, Memory],
    ctx: QueryContext,
    config: RetrievalConfig,
) -> list[Scored]:
    """Apply the factors and re-sort (ties keep the fused order).

    Age is counted from the newest dated candidate (or ``now``, if that is sooner): the
    freshest memory that matches decays not at all, like a pinned or evergreen one, so an
    old store's dated notes are not all outranked by its undated ones."""
    dated = [m.reference_time for m in memories.values() if not (m.pinned or m.evergreen)]
    if dated and config.time.decay != "none":
        ctx = replace(ctx, decay_from=min(ctx.now, max(dated)))
    if ctx.identifiers and config.statements.identifier_boost != 1.0:
        found = identified_threads(
            memories.values(), ctx.identifiers, config.statements.identifier_boost
        )
        ctx = replace(ctx, identified=found)
    out: list[Scored] = []
    for item in fused:
        memory = memories.get(item.memory_id)
        if memory is None:
            continue
        factors = factors_for(memory, ctx, config)
        out.append(make_scored(memory, item, item.score * math.prod(factors.values()), factors))
    return sorted(out, key=lambda s: -s.score)


def knowledge_updates(
    scored: list[Scored],
    vectors: Mapping[str, np.ndarray],
    config: RetrievalConfig,
    reference: datetime,
    applies: bool = True,
    cosines: Mapping[str, float] | None = None,
    calibration: Calibration = UNCALIBRATED,
    aside: dict[str, str] | None = None,
) -> list[Scored]:
    """Current facts first, as inferred (a factor).

    A memory marked superseded (``superseded_by``, or ``valid_until`` at or before
    ``reference``) is left to :mod:`recalld.retrieval.promises`: what a user stated is a
    rule, not a factor. Of two top candidates on the same subject, the older scores
    ``kupdate_factor`` when the newer restates it (cosine >= ``kupdate_similarity``; not a
    conversation turn, which retells or confirms rather than replaces) or says that it
    changed and gives the new value ("moved to Thursday the 9th", "now 3.50", "rebooked for
    the 28th": :func:`recalld.retrieval.replacement.gives_new_value`) with a cosine of at
    least ``kupdate_change_similarity`` (or loosely related and as good an answer to the
    query, by the query ``cosines``). Similarities are on the embedder's ``calibration``
    scale (:mod:`recalld.retrieval.calibration`), query ``cosines`` included.

    Premise (:mod:`recalld.retrieval.replacement`): the two can replace each other, not
    parts of one document, stated at different real times (an undated standing fact is
    older than a dated statement); a version number is not a new value. Pairs that would
    otherwise count stand aside, and ``aside`` (the search's ``stood_aside``) says how many
    and why. ``applies`` is False for questions about the past (a named time, "the first
    time"), whose answer may well be the older value.
    """
    marked = {s.memory.id for s in scored if is_superseded(s.memory, reference)}
    found: set[str] = set()
    if config.updates.kupdate_factor < 1.0 and applies:
        window = scored[: config.updates.kupdate_window]
        found, held = _restated(window, vectors, cosines or {}, config, calibration)
        found -= marked
        if held and aside is not None:
            aside["knowledge_updates"] = held_back(held)
    if not found:
        return scored
    out = []
    for item in scored:
        factor = config.updates.kupdate_factor if item.memory.id in found else 1.0
        if factor != 1.0:
            item = replace(
                item, score=item.score * factor, factors={**item.factors, "superseded": factor}
            )
        out.append(item)
    return sorted(out, key=lambda s: -s.score)


def held_back(reasons: Mapping[str, int]) -> str:
    """The trace line for pairs whose premise did not hold: how many, and why."""
    parts = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda r: -r[1]))
    total = sum(reasons.values())
    return f"{total} pair{'s' if total > 1 else ''} of alike candidates left as they are: {parts}"


def is_superseded(memory: Memory, reference: datetime) -> bool:
    """Marked as replaced by another memory, or past its ``valid_until``."""
    return memory.superseded_by is not None or (
        memory.valid_until is not None and memory.valid_until <= reference
    )


VERSION_ONLY = "the new value is only a version number"


def _restated(
    window: list[Scored],
    vectors: Mapping[str, np.ndarray],
    cosines: Mapping[str, float],
    config: RetrievalConfig,
    calibration: Calibration,
) -> tuple[set[str], dict[str, int]]:
    """Ids of the memories in ``window`` that a newer one restates or says has changed,
    and how many such pairs stood aside, by reason.

    A newer memory that says something changed is on the old one's subject when the two
    are close (``kupdate_change_similarity``), or when they are loosely related (cosine at
    least ``kupdate_related_similarity``) and the newer answers the query about as well as
    the older (query cosine at least ``kupdate_query_ratio`` x the older's): "she now lands
    on the 14th" and "Ana is visiting on April 12th" share few words but one question.
    """
    stale: dict[str, Memory] = {}
    held: dict[str, int] = {}
    window = [s for s in window if s.memory.id in vectors]
    if len(window) < 2:
        return set(stale), held
    matrix = np.stack([vectors[s.memory.id] for s in window])
    pairs = matrix @ matrix.T  # every pair's cosine in one product
    # A pair less alike than every threshold of _replaced is neither replaced nor held back
    # either way round: only the others are looked at, in the same order (i, then j > i).
    alike = ~(calibration.lift_all(pairs) < subject_floor(config))  # (NaN stays in)
    for i, j in np.argwhere(np.triu(alike, 1)).tolist():
        a, b = window[i], window[j]
        if other_projects(a.memory, b.memory):
            continue  # facts of two projects
        cosine = calibration.lift(float(pairs[i, j]))
        order = in_order(a.memory, b.memory)
        if isinstance(order, tuple):
            old, new = order
            why = _replaced(old, new, cosine, cosines, config)
            if why is True:
                stale[old.id] = new
            elif why:
                held[why] = held.get(why, 0) + 1
        elif _replaced(a.memory, b.memory, cosine, cosines, config) or _replaced(
            b.memory, a.memory, cosine, cosines, config
        ):
            held[order] = held.get(order, 0) + 1
    if config.updates.kupdate_exchange_minutes and stale:
        memories = [s.memory for s in window]
        for kept in confirmed_changes(memories, pairs, calibration, stale, config):
            del stale[kept]
        stale.update(shared_by_exchange(memories, pairs, calibration, stale, config, held))
    return set(stale), held


def _replaced(
    old: Memory,
    new: Memory,
    cosine: float,
    cosines: Mapping[str, float],
    config: RetrievalConfig,
) -> bool | str:
    """True when ``new`` restates ``old`` or gives its fact a new value; the reason when it
    would but for a version number; else False."""
    # A turn that repeats an older one retells or confirms it ("Noted: the move is on May
    # 30th"); a note or a fact restated later is its newer version.
    if cosine >= config.updates.kupdate_similarity and not is_turn(new):
        return True
    # A change names the new value ("now lands on April 14th", "bumped to 24.2"); "you're
    # now helping others" says nothing changed about a fact.
    thread = config.updates.kupdate_thread_subject and one_thread(old, new)
    if not names_any_value(new.content) or not same_subject(
        old.id, new.id, cosine, cosines, config, thread
    ):
        return False
    return True if gives_new_value(new.content) else VERSION_ONLY


def subject_floor(config: RetrievalConfig) -> float:
    """The least calibrated cosine at which :func:`_replaced` can say anything of a pair:
    below every one of its similarity thresholds it answers False either way round."""
    updates = config.updates
    return min(
        updates.kupdate_similarity,
        updates.kupdate_change_similarity,
        updates.kupdate_related_similarity,
    )


def same_subject(
    old: str,
    new: str,
    cosine: float,
    cosines: Mapping[str, float],
    config: RetrievalConfig,
    thread: bool = False,
) -> bool:
    """Whether a newer memory (id ``new``) that says something changed is on the subject of
    ``old``, given their ``cosine`` and the query ``cosines`` (see :func:`knowledge_updates`);
    ``thread``: the two are turns of one thread (``kupdate_thread_subject``), where related
    is enough."""
    if cosine >= config.updates.kupdate_change_similarity:
        return True
    if cosine < config.updates.kupdate_related_similarity:
        return False
    if thread:
        return True
    old_q, new_q = cosines.get(old), cosines.get(new)
    return (
        old_q is not None
        and new_q is not None
        and new_q >= config.updates.kupdate_query_ratio * old_q
    )


def one_thread(a: Memory, b: Memory) -> bool:
    """Whether two memories are turns of one session (a conversation, a ticket's thread)."""
    return a.session_id is not None and a.session_id == b.session_id


def other_projects(a: Memory, b: Memory) -> bool:
    """Two memories of two named projects: the same words are two projects' facts."""
    return a.project is not None and b.project is not None and a.project != b.project


def time_order(scored: list[Scored], order: str | None, config: RetrievalConfig) -> list[Scored]:
    """For a query about the earliest or latest of something, the top ``order_depth``
    candidates gain up to ``order_weight`` by their place in time: rank-normalised, so
    the oldest (``earliest``) or the newest (``latest``) gains the whole share and ties in
    time gain the same. Deeper candidates are untouched; the result is re-sorted."""
    top = scored[: config.time.order_depth]
    if order is None or config.time.order_weight <= 0 or len(top) < 2:
        return scored
    times = sorted({s.memory.reference_time for s in top})
    if len(times) < 2:
        return scored
    place = {t: i / (len(times) - 1) for i, t in enumerate(times)}
    out = []
    for item in top:
        position = place[item.memory.reference_time]
        share = config.time.order_weight * (position if order == "latest" else 1.0 - position)
        if share:
            factors = {**item.factors, f"order_{order}": 1.0 + share}
            item = Scored(item.memory, item.fused, item.score * (1.0 + share), factors)
        out.append(item)
    return sorted(out, key=lambda s: -s.score) + scored[len(top) :]
