"""Compact plain text of results for a model to read (the MCP tools' text content).

Every memory line carries its id, so the model can pass it back to the other tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from recalld.records import Context, Hit, Memory, SearchResult

SHOWN_CHARS = 1500
"""A memory's content is cut to this many characters in a list of hits (memory_get shows
all of it): a few long chunks must not crowd out the rest of the answer."""


def memories(count: int) -> str:
    return f"{count} memor{'y' if count == 1 else 'ies'}"


def _when(memory: Memory) -> str:
    return memory.reference_time.strftime("%Y-%m-%d")


def _labels(memory: Memory) -> str:
    parts = [_when(memory), memory.type]
    if memory.project:
        parts.append(f"project {memory.project}")
    if memory.session_id:
        parts.append(f"session {memory.session_id}")
    if memory.tags:
        parts.append("tags " + ", ".join(memory.tags))
    state = currency(memory)
    if state:
        parts.append(state)
    return " | ".join(parts)


def currency(memory: Memory, now: datetime | None = None) -> str | None:
    """Whether a memory still holds, when it says otherwise: ``superseded by ID``, ``no
    longer current since DAY`` (past its ``valid_until``) or ``valid until DAY``."""
    if memory.superseded_by:
        return f"superseded by {memory.superseded_by}"
    if memory.valid_until is None:
        return None
    past = memory.valid_until <= (now or datetime.now(UTC))
    return f"{'no longer current since' if past else 'valid until'} {memory.valid_until:%Y-%m-%d}"


def _content(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + " … (cut; memory_get shows all)"


def _why(hit: Hit) -> str:
    trace = hit.trace
    if trace is None:
        return ""
    channels = ", ".join(f"{c.channel} #{c.rank} ({c.score:.3f})" for c in trace.channels)
    fusion = " + ".join(f"{name} {value:.4f}" for name, value in trace.fusion.items())
    factors = " ".join(f"x{value:.3f} {name}" for name, value in trace.adjustments.items())
    return (
        f"\n   why: channels {channels or 'none'}; fusion {fusion or 'none'} = "
        f"{trace.fused_score:.4f}; {factors or 'no adjustment'} -> "
        f"{trace.final_score:.4f}"
        + (f"; promises: {'; '.join(trace.promises)}" if trace.promises else "")
    )


def describe_search(result: SearchResult, explain: bool = False) -> str:
    """One numbered entry per hit: id, score, labels, then the content on its own line."""
    if not result.hits:
        return f"No memory matches {result.query!r}."
    lines = [f"{memories(len(result.hits))} for {result.query!r}, best first:"]
    for hit in result.hits:
        memory = hit.memory
        lines.append(f"{hit.rank}. id {memory.id} | score {hit.score:.4f} | {_labels(memory)}")
        if hit.collection is not None:
            label = hit.collection
            about = f": {'; '.join(label.context)}" if label.context else ""
            lines.append(f"   from {label.name}/{label.path}{about}")
        lines.append(f"   {_content(memory.content)}" + (_why(hit) if explain else ""))
        if hit.related:
            lines.append(f"   (+{len(hit.related)} more matching memories of this session)")
    return "\n".join(lines)


def describe_list(found: Sequence[Memory], offset: int = 0, newest_first: bool = True) -> str:
    """One entry per memory of a listing: id and labels, then the (cut) content."""
    if not found:
        return "No memory matches these filters."
    first = f" from #{offset + 1}" if offset else ""
    order = "newest" if newest_first else "oldest"
    lines = [f"{memories(len(found))}{first}, {order} first:"]
    for memory in found:
        lines.append(f"- id {memory.id} | {_labels(memory)}")
        lines.append(f"  {_content(memory.content)}")
    return "\n".join(lines)


def describe_context(context: Context) -> str:
    if not context.text:
        return "No memory is relevant to this query."
    ids = ", ".join(h.memory.id for h in context.hits)
    return (
        f"{context.text}\n\n({memories(len(context.hits))}, {context.tokens} of "
        f"{context.budget} tokens; ids: {ids})"
    )


def describe_memory(memory: Memory) -> str:
    """Everything a model needs about one memory, content in full."""
    lines = [f"id {memory.id} | {_labels(memory)}"]
    if memory.forgotten_at:
        lines.append(f"forgotten at {memory.forgotten_at.isoformat()}")
    lines.append(memory.content)
    return "\n".join(lines)
