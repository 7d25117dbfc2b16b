"""Query understanding, offline: type, lexical terms, entities, time window, mode."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from recalld.entities import extract_entities
from recalld.records import SearchMode, TimeRange
from recalld.retrieval.dates import (
    Anchor,
    TimeOrder,
    anchor_event,
    resolve_time_window,
    time_order,
    time_phrases,
)
from recalld.text import keywords

QueryType = str  # "simple" | "preference" | "temporal" | "aggregation"

PREFERENCE_SIGNALS = (
    "recommend",
    "suggest",
    "advice",
    "resources",
    "tools",
    "accessories",
    "what should",
    "would you",
    "based on my",
    "given my",
    "any tips",
    "ideas for",
    "favorite",
    "prefer",
)
"""CEMS's preference signals, plus a few seen in LongMemEval-style questions."""
TEMPORAL_PATTERNS = (
    "first",
    "last",
    "before",
    "after",
    "when",
    "how many days",
    "how long",
    "earliest",
    "latest",
    "most recent",
    "happened first",
    "ago",
    "how many weeks",
    "how many months",
    "what date",
    "what time",
    "which came",
    "order of",
    "yesterday",
    "last week",
)
"""CEMS's temporal patterns, plus explicit time words."""
AGGREGATION_PATTERNS = (
    "how many",
    "how much",
    "total",
    "combined",
    "all the times",
    "how often",
    "different",
    "various",
    "all the different",
    "in total",
    "altogether",
    "list all",
    "each of",
)
"""CEMS's aggregation patterns."""
_ADVICE_NOUNS = r"(?:tips|suggestions|ideas|advice|recommendations)"
ADVICE_REQUEST = re.compile(
    r"\b(?:can|could|would|will) you (?:please )?(?:recommend|suggest)\b"
    rf"|\bany {_ADVICE_NOUNS}\b"
    r"|\bwhat (?:should|could|can) i\b"
    rf"|\b(?:give|offer|share) me (?:some |any )?{_ADVICE_NOUNS}\b"
    r"|\b(?:recommend|suggest) (?:me |some |a |an |any )"
    rf"|\bi'?m (?:looking for|after) (?:some |any )?{_ADVICE_NOUNS}\b",
    re.IGNORECASE,
)
"""The query asks the assistant for advice ("any tips?", "can you suggest a hotel?", "what
should I serve?"), as opposed to asking about advice given ("what did Caroline recommend?")."""
ADVICE_GIVEN = re.compile(
    r"\b(?:did|didn't|had|have|has) \w+ (?:\w+ )?(?:recommend|suggest)(?:ed)?\b",
    re.IGNORECASE,
)
"""Advice asked about after the fact ("did you recommend a hotel last time?")."""


@dataclass(frozen=True)
class QueryPlan:
    """What the pipeline learned about a query before retrieving anything."""

    text: str
    query_type: QueryType
    terms: tuple[str, ...]
    entities: tuple[str, ...]
    time_window: TimeRange | None
    mode: SearchMode
    reference_time: datetime
    order: TimeOrder | None = None
    """``earliest`` or ``latest`` when the query asks for an end of time ("the first time")."""
    anchor: Anchor | None = None
    """An event the question is placed relative to ("before I moved"); the pipeline finds
    its time and turns it into ``time_window`` when the query names no time itself."""
    anchor_memory: str | None = None
    """The memory whose time dated ``anchor``, once the pipeline has found one."""
    time_terms: tuple[str, ...] = ()
    """The words of the query that only say when ("january", "week"): left out of
    ``terms``, searched on their own at ``time_terms_weight``."""
    advice: bool = False
    """The query asks for advice for the asker (``ADVICE_REQUEST``): what answers it is
    what they said about their situation and tastes, a conversation's theme more than any
    one statement."""


def classify(query: str) -> QueryType:
    """The seeds' pattern lists; aggregation wins over temporal (``how many days`` is both)."""
    text = f" {query.lower()} "
    if any(p in text for p in AGGREGATION_PATTERNS) and not any(
        p in text for p in ("how many days", "how many weeks", "how many months")
    ):
        return "aggregation"
    if any(f" {p}" in text for p in TEMPORAL_PATTERNS):
        return "temporal"
    if any(p in text for p in PREFERENCE_SIGNALS):
        return "preference"
    return "simple"


def understand(query: str, mode: SearchMode, reference: datetime) -> QueryPlan:
    """Build the plan; ``auto`` resolves to ``hybrid`` unless the query has no lexical terms."""
    timing = {w for phrase in time_phrases(query) for w in keywords(phrase)}
    # Words that only say when ("last month", "these days") are the time window's job;
    # as search terms they match every memory that mentions a month or a day.
    terms = tuple(t for t in keywords(query) if t not in timing) or tuple(keywords(query))
    # ... but a note may say "January" in words: they are searched too, at a low weight.
    time_terms = tuple(t for t in dict.fromkeys(keywords(query)) if t in timing and t not in terms)
    resolved: SearchMode = mode
    if mode == "auto":
        resolved = "hybrid" if terms else "vector"
    return QueryPlan(
        text=query,
        query_type=classify(query),
        terms=terms,
        entities=tuple(dict.fromkeys([*extract_entities(query), *terms])),
        time_window=resolve_time_window(query, reference),
        mode=resolved,
        reference_time=reference,
        order=time_order(query),
        anchor=anchor_event(query),
        advice=asks_advice(query),
        time_terms=time_terms,
    )


def asks_advice(query: str) -> bool:
    """Whether the query asks the assistant for recommendations, tips or ideas."""
    return ADVICE_REQUEST.search(query) is not None and ADVICE_GIVEN.search(query) is None
