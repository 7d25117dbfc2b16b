"""Score adjustments: each a named multiplicative factor recorded in the trace."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from recalld.records import Memory, TimeRange
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused
from recalld.text import only_asks, states_event, words


@dataclass(frozen=True)
class Scored:
    """A fused candidate with its memory, its adjustment factors and its final score."""

    memory: Memory
    fused: Fused
    score: float
    factors: Mapping[str, float] = field(default_factory=dict)


def decay_factor(memory: Memory, now: datetime, config: RetrievalConfig) -> float:
    """Time decay by age of the memory's reference time; pinned and evergreen are exempt."""
    if config.decay == "none" or memory.pinned or memory.evergreen:
        return 1.0
    days = max(0.0, (now - memory.reference_time).total_seconds() / 86400)
    if config.decay == "hyperbolic":
        return 1.0 / (1.0 + days / config.half_life_days)
    return float(0.5 ** (days / config.half_life_days))


def project_factor(memory: Memory, project: str | None, config: RetrievalConfig) -> float:
    if project is None:
        return 1.0
    if memory.project == project:
        return config.project_boost
    return config.project_penalty if memory.project else config.no_project_penalty


_ABOUT_ASSISTANT = re.compile(
    r"\byou\s+(?:said|told|mentioned|suggested|recommended|gave|provided|listed|wrote|"
    r"explained|shared|described)\b|\bdid\s+you\s+(?:say|tell|mention|suggest|recommend|"
    r"give|provide|list|write|explain|share|describe)\b|\byour\s+(?:suggestion|"
    r"recommendation|answer|advice|list|explanation)\b|\b(?:remind me (?:what|of) (?:you|the))\b",
    re.IGNORECASE,
)
"""Questions about what the assistant said before. A request ("can you suggest a hotel?")
is not one: it asks for something new, which the user's own turns inform."""


def wanted_role(query: str) -> str:
    """``assistant`` when the query asks what the assistant said, else ``user``: a personal
    memory question is about what the user told, not what was answered."""
    return "assistant" if _ABOUT_ASSISTANT.search(query) else "user"


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


def role_factor(memory: Memory, role: str | None, config: RetrievalConfig) -> float:
    speaker = memory.metadata.get("role")
    if role is None or speaker is None or config.role_boost == 1.0:
        return 1.0
    return config.role_boost if speaker == role else 1.0


def speaker_of(memory: Memory) -> str | None:
    """Who said a memory: ``metadata["speaker"]``, else a ``role`` that is a name (not
    ``user`` / ``assistant`` / ``system``)."""
    speaker = memory.metadata.get("speaker") or memory.metadata.get("role")
    if not isinstance(speaker, str) or speaker.lower() in GENERIC_ROLES:
        return None
    return speaker


GENERIC_ROLES = frozenset({"user", "assistant", "system", "tool", "human", "ai", "speaker"})


def event_factor(memory: Memory, config: RetrievalConfig) -> float:
    """Memories that tell of an event score ``event_boost`` more: what people ask of their
    memory is mostly what happened (what they did, got, saw), and a turn that says so is
    more often the answer than one that asks or advises."""
    if config.event_boost == 1.0:
        return 1.0
    tells = memory.tells_event
    if tells is None:  # a memory that was not read from a store
        tells = states_event(memory.content)
    return config.event_boost if tells else 1.0


def asks_factor(memory: Memory, advice: bool, config: RetrievalConfig) -> float:
    """Memories that only ask score ``asks_penalty``: a question does not state the fact
    another question is after. Not for a query that asks for advice, whose answer is what
    the user asked for before."""
    if config.asks_penalty == 1.0 or advice:
        return 1.0
    return config.asks_penalty if only_asks(memory.content, memory.tells_event) else 1.0


def speaker_factor(memory: Memory, query_words: frozenset[str], config: RetrievalConfig) -> float:
    """A question that names a person ("where has Melanie camped?") is mostly answered by
    what that person said: their turns score ``speaker_boost`` more."""
    speaker = speaker_of(memory)
    if speaker is None or config.speaker_boost == 1.0 or not query_words:
        return 1.0
    names = words(speaker)
    return config.speaker_boost if names and all(n in query_words for n in names) else 1.0


def window_factor(memory: Memory, window: TimeRange | None, config: RetrievalConfig) -> float:
    if window is None:
        return 1.0
    return config.window_boost if window.contains(memory.reference_time) else 1.0


def factors_for(memory: Memory, ctx: QueryContext, config: RetrievalConfig) -> dict[str, float]:
    """Every factor that is not 1.0, by name."""
    now, project = ctx.now, ctx.project
    factors = {
        "decay": decay_factor(memory, now, config),
        "priority": memory.priority if config.use_priority else 1.0,
        "pinned": config.pinned_boost if memory.pinned else 1.0,
        "project": project_factor(memory, project, config),
        "type": config.type_boosts.get(memory.type, 1.0),
        "significance": 1.0 + config.significance_weight * (memory.significance - 0.5),
        "reinforcement": 1.0 + config.reinforcement_weight * math.log2(1 + memory.access_count),
        "role": role_factor(memory, ctx.role, config),
        "speaker": speaker_factor(memory, ctx.query_words, config),
        "time_window": window_factor(memory, ctx.window, config),
        "event_statement": event_factor(memory, config),
        "only_asks": asks_factor(memory, ctx.advice, config),
    }
    return {name: value for name, value in factors.items() if value != 1.0}


def adjust(
    fused: list[Fused],
    memories: Mapping[str, Memory],
    ctx: QueryContext,
    config: RetrievalConfig,
) -> list[Scored]:
    """Apply the factors and re-sort (ties keep the fused order)."""
    out: list[Scored] = []
    for item in fused:
        memory = memories.get(item.memory_id)
        if memory is None:
            continue
        factors = factors_for(memory, ctx, config)
        out.append(Scored(memory, item, item.score * math.prod(factors.values()), factors))
    return sorted(out, key=lambda s: -s.score)


def knowledge_updates(
    scored: list[Scored], vectors: Mapping[str, np.ndarray], config: RetrievalConfig
) -> list[Scored]:
    """When two of the top candidates say nearly the same thing (cosine >= the threshold) at
    different times, the older is taken as superseded and scores ``kupdate_factor`` less, so
    the newer value ranks first. Memories explicitly marked ``superseded_by`` always are."""
    window = scored[: config.kupdate_window]
    older: set[str] = {s.memory.id for s in window if s.memory.superseded_by}
    if config.kupdate_factor < 1.0:
        for i, a in enumerate(window):
            va = vectors.get(a.memory.id)
            if va is None:
                continue
            for b in window[i + 1 :]:
                vb = vectors.get(b.memory.id)
                if vb is None or float(va @ vb) < config.kupdate_similarity:
                    continue
                if a.memory.reference_time != b.memory.reference_time:
                    stale = a if a.memory.reference_time < b.memory.reference_time else b
                    older.add(stale.memory.id)
    if not older:
        return scored
    out = [
        replace(s, score=s.score * config.kupdate_factor,
                factors={**s.factors, "superseded": config.kupdate_factor})
        if s.memory.id in older else s
        for s in scored
    ]  # fmt: skip
    return sorted(out, key=lambda s: -s.score)


def time_order(scored: list[Scored], order: str | None, config: RetrievalConfig) -> list[Scored]:
    """For a query about the earliest or latest of something, the top ``order_depth``
    candidates gain up to ``order_weight`` by their place in time: rank-normalised, so
    the oldest (``earliest``) or the newest (``latest``) gains the whole share and ties in
    time gain the same. Deeper candidates are untouched; the result is re-sorted."""
    top = scored[: config.order_depth]
    if order is None or config.order_weight <= 0 or len(top) < 2:
        return scored
    times = sorted({s.memory.reference_time for s in top})
    if len(times) < 2:
        return scored
    place = {t: i / (len(times) - 1) for i, t in enumerate(times)}
    out = []
    for item in top:
        position = place[item.memory.reference_time]
        share = config.order_weight * (position if order == "latest" else 1.0 - position)
        if share:
            factors = {**item.factors, f"order_{order}": 1.0 + share}
            item = Scored(item.memory, item.fused, item.score * (1.0 + share), factors)
        out.append(item)
    return sorted(out, key=lambda s: -s.score) + scored[len(top) :]
