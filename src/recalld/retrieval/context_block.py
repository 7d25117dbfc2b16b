"""The lines of a context block: no replaced fact presented as current.

A memory its user marked as replaced (``supersede OLD --by NEW``, or past its
``valid_until``) stays in the block when the search ranks it in, marked with what replaced
it and when::

    - I moved from Lisbon to Porto last month.
    - [replaced on 2026-11-28 by: "I moved from Lisbon to Porto last month."] I live in ...

Marked rather than left out: a question may need the history ("where did I live before
Porto?"), and an agent that reads the mark knows which fact is current. The mark quotes the
replacement (cut to :data:`QUOTED_CHARS`), so it reads alone even when the budget leaves the
replacement's own line out; the search ranks the replacement just above it
(:mod:`recalld.retrieval.promises`). "When" is the replacement's own time (its event time,
else when it was stored). A replacement that is forgotten, or outside the search's filters,
is not quoted: the mark then only says the fact is no longer current.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from recalld.records import Memory, MemoryFilter
from recalld.retrieval.adjust import is_superseded
from recalld.retrieval.promises import Lookup, current_successors

QUOTED_CHARS = 120
"""A replacement quoted in a mark is cut to this many characters: enough for a fact, short
enough not to crowd the budget."""


def context_line(memory: Memory, successor: Memory | None, reference: datetime) -> str:
    """One line of context: the date (when known), the mark of a replaced fact, the content."""
    when = memory.event_time.strftime("%Y-%m-%d") if memory.event_time else None
    mark = replaced_mark(memory, successor, reference)
    parts = [f"({when})" if when else "", f"[{mark}]" if mark else "", memory.content]
    return "- " + " ".join(p for p in parts if p)


def replaced_mark(memory: Memory, successor: Memory | None, reference: datetime) -> str | None:
    """What replaced ``memory`` and when, or None when it is current at ``reference``."""
    if not is_superseded(memory, reference):
        return None
    if successor is not None:
        quoted = successor.content
        if len(quoted) > QUOTED_CHARS:
            quoted = quoted[: QUOTED_CHARS - 1].rstrip() + "…"
        return f'replaced on {successor.reference_time:%Y-%m-%d} by: "{quoted}"'
    if memory.superseded_by is None and memory.valid_until is not None:
        return f"no longer current since {memory.valid_until:%Y-%m-%d}"
    return "replaced: no longer current"


def successors_in_context(
    memories: Sequence[Memory], lookup: Lookup, filters: MemoryFilter, reference: datetime
) -> dict[str, Memory]:
    """The current successor of each replaced memory of ``memories`` that has one."""
    stale = [m for m in memories if is_superseded(m, reference)]
    return current_successors(stale, lookup, filters, reference) if stale else {}
