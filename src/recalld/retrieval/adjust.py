"""Score adjustments: each a named multiplicative factor recorded in the trace."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from recalld.records import Memory
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused


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
    return 0.5 ** (days / config.half_life_days)


def project_factor(memory: Memory, project: str | None, config: RetrievalConfig) -> float:
    if project is None:
        return 1.0
    if memory.project == project:
        return config.project_boost
    return config.project_penalty if memory.project else config.no_project_penalty


def factors_for(
    memory: Memory, now: datetime, project: str | None, config: RetrievalConfig
) -> dict[str, float]:
    """Every factor that is not 1.0, by name."""
    factors = {
        "decay": decay_factor(memory, now, config),
        "priority": memory.priority if config.use_priority else 1.0,
        "pinned": config.pinned_boost if memory.pinned else 1.0,
        "project": project_factor(memory, project, config),
        "type": config.type_boosts.get(memory.type, 1.0),
        "significance": 1.0 + config.significance_weight * (memory.significance - 0.5),
        "reinforcement": 1.0 + config.reinforcement_weight * math.log2(1 + memory.access_count),
    }
    return {name: value for name, value in factors.items() if value != 1.0}


def adjust(
    fused: list[Fused],
    memories: Mapping[str, Memory],
    now: datetime,
    project: str | None,
    config: RetrievalConfig,
) -> list[Scored]:
    """Apply the factors and re-sort (ties keep the fused order)."""
    out: list[Scored] = []
    for item in fused:
        memory = memories.get(item.memory_id)
        if memory is None:
            continue
        factors = factors_for(memory, now, project, config)
        out.append(Scored(memory, item, item.score * math.prod(factors.values()), factors))
    return sorted(out, key=lambda s: -s.score)
