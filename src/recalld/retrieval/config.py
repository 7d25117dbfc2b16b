"""Every tuning constant of the pipeline, named, with its reason: one frozen
:class:`RetrievalConfig` made of sections (:mod:`recalld.retrieval.sections`), and the presets.

Code reads a setting through its section (``config.fusion.rrf_k``). The flat names
(``rrf_k``) stay accepted wherever settings are given: ``RetrievalConfig(rrf_k=30)``,
:meth:`RetrievalConfig.with_changes`, ``recalld bench --set rrf_k=30``, the variants of
``scripts/dev_eval.py``; reports list a config by its flat names (:meth:`RetrievalConfig.flat`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any

from recalld.errors import InvalidInputError
from recalld.retrieval.sections import (
    LISTS,
    AssemblySettings,
    CandidateSettings,
    ExpansionSettings,
    FusionSettings,
    MemorySettings,
    PromiseSettings,
    RerankSettings,
    SessionSettings,
    StatementSettings,
    TimeSettings,
    UpdateSettings,
)

__all__ = ["FLAT", "LISTS", "PRESETS", "SECTIONS", "RetrievalConfig", "get_preset"]

SECTIONS: Mapping[str, type[Any]] = MappingProxyType(
    {
        "candidates": CandidateSettings,
        "fusion": FusionSettings,
        "memory": MemorySettings,
        "time": TimeSettings,
        "statements": StatementSettings,
        "updates": UpdateSettings,
        "promises": PromiseSettings,
        "sessions": SessionSettings,
        "assembly": AssemblySettings,
        "expansion": ExpansionSettings,
        "rerank": RerankSettings,
    }
)
"""The sections of a config, in pipeline order (the order :meth:`RetrievalConfig.flat` lists)."""

FLAT: Mapping[str, str] = MappingProxyType(
    {
        # candidates
        "candidate_multiplier": "candidates",
        "min_candidates": "candidates",
        "adjust_depth": "candidates",
        "min_adjust": "candidates",
        "stable_limit": "candidates",
        "channels": "candidates",
        # fusion
        "fusion": "fusion.method",
        "rrf_k": "fusion",
        "channel_weights": "fusion",
        "time_terms_weight": "fusion",
        "original_query_weight": "fusion",
        "rank_bonus_first": "fusion",
        "rank_bonus_top3": "fusion",
        "heading_weight": "fusion",
        "heading_depth": "fusion",
        "vector_weight": "fusion",
        "text_weight": "fusion",
        # memory
        "use_priority": "memory",
        "pinned_boost": "memory",
        "project_boost": "memory",
        "project_penalty": "memory",
        "no_project_penalty": "memory",
        "type_boosts": "memory",
        "significance_weight": "memory",
        "reinforcement_weight": "memory",
        # time
        "decay": "time",
        "half_life_days": "time",
        "decay_turns": "time",
        "window_boost": "time",
        "order_weight": "time",
        "order_depth": "time",
        "anchor_events": "time",
        "anchor_min_score": "time",
        # statements
        "role_boost": "statements",
        "speaker_boost": "statements",
        "identifier_boost": "statements",
        "event_boost": "statements",
        "asks_penalty": "statements",
        # updates
        "kupdate_factor": "updates",
        "kupdate_similarity": "updates",
        "kupdate_change_similarity": "updates",
        "kupdate_related_similarity": "updates",
        "kupdate_query_ratio": "updates",
        "kupdate_window": "updates",
        "kupdate_follow": "updates",
        "kupdate_follow_pool": "updates",
        "kupdate_exchange_minutes": "updates",
        "kupdate_thread_subject": "updates",
        # promises
        "superseded_factor": "promises",
        "superseded": "promises",
        # sessions
        "session_boost": "sessions",
        "session_support": "sessions",
        "session_support_turns": "sessions",
        "topic_weight": "sessions",
        "topic_turns": "sessions",
        "neighbor_weight": "sessions",
        "answer_weight": "sessions",
        "reply_weight": "sessions",
        "neighbor_radius": "sessions",
        "neighbor_depth": "sessions",
        # assembly
        "min_score": "assembly",
        "max_gap": "assembly",
        "protect_top": "assembly",
        "dedupe": "assembly",
        "mmr_lambda": "assembly",
        "mmr_similarity": "assembly",
        "diverse_aggregation": "assembly",
        "diversity_lambda": "assembly",
        "max_tokens": "assembly",
        # expansion
        "expand": "expansion",
        "llm_routing": "expansion",
        "expansion_weight": "expansion",
        "strong_signal_score": "expansion",
        "strong_signal_gap": "expansion",
        "strong_signal_weight": "expansion",
        # rerank
        "rerank_depth": "rerank",
        "rerank_chunk_words": "rerank",
        "rerank_weight_top3": "rerank",
        "rerank_weight_top10": "rerank",
        "rerank_weight_rest": "rerank",
    }
)
"""Every flat setting name and the section that holds it (``section.field`` where the section
names the field otherwise). A new setting is a field in its section (with its reason) and
one line here; ``tests/retrieval/test_config_sections.py`` checks that the two agree."""

_FIELDS = {name: frozenset(f.name for f in fields(kind)) for name, kind in SECTIONS.items()}
_DOTTED = [f"{name}.{field}" for name, names in _FIELDS.items() for field in sorted(names)]


def _path(name: str) -> tuple[str, str] | None:
    """The section and field a setting name means (a flat name or ``section.field``)."""
    if name in FLAT:
        section, _, field_name = FLAT[name].partition(".")
        return section, field_name or name
    section, dot, field_name = name.partition(".")
    return (section, field_name) if dot and field_name in _FIELDS.get(section, ()) else None


def _unknown(names: list[str]) -> InvalidInputError:
    said = []
    for name in names:
        close = difflib.get_close_matches(name, [*FLAT, *_DOTTED], n=1)
        said.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return InvalidInputError(f"unknown retrieval setting(s): {', '.join(said)}")


def _sectioned(base: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (section name -> section) with ``settings`` applied: whole sections first,
    then single settings by flat name or ``section.field`` (``fusion="linear"`` is the flat
    name of ``fusion.method``, a string where the section is a ``FusionSettings``)."""
    sections = dict(base)
    changes: dict[str, dict[str, Any]] = {}
    unknown: list[str] = []
    for name, value in settings.items():
        if name in SECTIONS and isinstance(value, SECTIONS[name]):
            sections[name] = value
        elif (path := _path(name)) is not None:
            changes.setdefault(path[0], {})[path[1]] = value
        else:
            unknown.append(name)
    if unknown:
        raise _unknown(sorted(unknown))
    for section, values in changes.items():
        sections[section] = replace(sections[section], **values)
    return sections


@dataclass(frozen=True, init=False)
class RetrievalConfig:
    """Settings of one search, in sections; presets are instances, variants come from
    :meth:`with_changes`.

    ``RetrievalConfig(rrf_k=30)`` and ``RetrievalConfig(fusion=FusionSettings(rrf_k=30))``
    make the same config: a keyword is a section, a flat setting name (``FLAT``) or
    ``section.field``, and single settings apply on top of sections. An unknown name is an
    error that suggests the closest known one. Change a config with :meth:`with_changes`,
    which keeps every setting not named (``dataclasses.replace`` takes whole sections).
    """

    # A new setting is not a field here: it goes in its section (sections.py), with its
    # reason, and gets one line in FLAT above.
    candidates: CandidateSettings
    """What each channel proposes, and how many fused candidates are scored."""
    fusion: FusionSettings
    """How the channels' ranked lists become one."""
    memory: MemorySettings
    """Factors a memory carries whatever the query."""
    time: TimeSettings
    """Decay, the query's time window, its ends of time and events."""
    statements: StatementSettings
    """What a memory states and who states it."""
    updates: UpdateSettings
    """Knowledge updates we infer."""
    promises: PromiseSettings
    """What a user stated: memories marked superseded."""
    sessions: SessionSettings
    """Evidence from a memory's session."""
    assembly: AssemblySettings
    """Filters, duplicates, diversity, the context budget."""
    expansion: ExpansionSettings
    """Query expansion and routing by an LLM; the strong-signal probe."""
    rerank: RerankSettings
    """The reranker stage."""

    def __init__(self, **settings: Any) -> None:
        defaults = {name: kind() for name, kind in SECTIONS.items()}
        for name, section in _sectioned(defaults, settings).items():
            object.__setattr__(self, name, section)

    def sections(self) -> dict[str, Any]:
        """Section name -> section, in pipeline order."""
        return {name: getattr(self, name) for name in SECTIONS}

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name, in the order of ``FLAT`` (reports list this)."""
        out: dict[str, Any] = {}
        for name in FLAT:
            section, field_name = _path(name) or (name, name)
            out[name] = getattr(getattr(self, section), field_name)
        return out

    def with_changes(self, **changes: Any) -> RetrievalConfig:
        """A copy with some settings changed: flat names (``rrf_k=30``), ``section.field``
        (``**{"fusion.rrf_k": 30}``) or whole sections; unknown names are an error."""
        return RetrievalConfig(**_sectioned(self.sections(), changes))

    def plain(self) -> RetrievalConfig:
        """A copy that only fuses the channels: every adjustment, support and diversity
        stage off, and the optional model stages too. With one channel this is that
        channel's own ranking (a baseline)."""
        return self.with_changes(
            decay="none",
            use_priority=False,
            pinned_boost=1.0,
            project_boost=1.0,
            project_penalty=1.0,
            no_project_penalty=1.0,
            type_boosts=dict.fromkeys(self.memory.type_boosts, 1.0),
            significance_weight=0.0,
            reinforcement_weight=0.0,
            role_boost=1.0,
            speaker_boost=1.0,
            identifier_boost=1.0,
            event_boost=1.0,
            asks_penalty=1.0,
            window_boost=1.0,
            order_weight=0.0,
            anchor_events=False,
            kupdate_factor=1.0,
            superseded_factor=1.0,
            session_boost=0.0,
            topic_weight=0.0,
            neighbor_weight=0.0,
            answer_weight=0.0,
            reply_weight=0.0,
            time_terms_weight=0.0,
            heading_weight=0.0,
            mmr_lambda=1.0,
            diverse_aggregation=False,
            min_score=0.0,
            max_gap=0.0,
            dedupe=False,
            expand=False,
            llm_routing=False,
            rerank_depth=0,
            strong_signal_weight=1.0,
        )


BALANCED = RetrievalConfig()
"""The default: every mechanism that measured as a gain on LongMemEval and LoCoMo."""
FAST = BALANCED.with_changes(
    channels=("semantic", "bm25"),
    candidate_multiplier=2,
    min_candidates=20,
    session_boost=0.0,
    neighbor_weight=0.0,
    min_adjust=30,
    stable_limit=20,
)
"""Two channels, small pools, no session or neighbour evidence: the cheapest hybrid search.
The session's topic for advice requests stays on: one pass over the scored candidates, and
it gained two LongMemEval_S questions at R@1 and one synth question here."""
THOROUGH = BALANCED.with_changes(candidate_multiplier=8, min_candidates=100, neighbor_radius=2)
"""Deeper pools and neighbour support two turns either side."""

PRESETS: Mapping[str, RetrievalConfig] = MappingProxyType(
    {"fast": FAST, "balanced": BALANCED, "thorough": THOROUGH}
)


def get_preset(name: str) -> RetrievalConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}"
        ) from None
