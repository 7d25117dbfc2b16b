"""The candidates just below the hits, each with why it lost (``near_misses`` asked of a
search): what the inspector and ``--explain`` show as near misses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from recalld.retrieval.adjust import Scored
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.request import SearchRequest

HELD_DOWN = 0.9995
"""A near miss names the factors under this as what held it down: one that shows as x1.000
at the trace's three decimals (a day's decay) held nothing down."""


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
        if copy and config.assembly.dedupe:
            reason = "dropped: the same content as a better-scored memory"
        elif reason.startswith("dropped"):
            pass
        elif request.granularity == "session" and (memory.session_id or memory.id) in sessions:
            reason = "another memory of its session ranked higher"
        elif item.score > lowest and len(chosen) == request.limit:
            reason = "passed over for diversity: too like a hit above it"
        else:
            reason = (
                f"ranked under the last of the {request.limit} hits asked for "
                f"({item.score:.4f} < {lowest:.4f})"
            )
        held = sorted((v, k) for k, v in item.factors.items() if v < HELD_DOWN)
        if held:
            reason += "; held down by " + ", ".join(f"{k} x{v:.3f}" for v, k in held)
        missed.append((item, reason))
        if len(missed) == request.near_misses:
            break
    return missed
