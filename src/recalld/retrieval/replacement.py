"""When a newer memory can replace an older one: the premise of inferred knowledge updates.

Knowledge updates (:func:`recalld.retrieval.adjust.knowledge_updates`) and following a fact
forward (:mod:`recalld.retrieval.updates`) demote a memory that a newer one restates or says
has changed. That inference is a factor, and it holds only between two statements that can
replace each other (CONVENTIONS 15):

1. **Not parts of one document.** The sections of a page (chunks of one indexed file) sit
   side by side: none is a newer version of another, however alike they read.
2. **On one subject.** The callers check that the newer is close to the older (or as good
   an answer to the query); who said each does not matter: in a team's channel anyone may
   move the sprint demo that someone else announced.
3. **Stated at different real times.** A memory's own time is its event time, or, for a
   memory stored as it was said (added directly), when it was stored. A memory ingested
   from a source (an indexed file, an imported transcript or data set) without an event time
   has only the moment it was ingested, and ingestion order is not time: the chunks of one
   indexing run never replace each other. An undated standing fact (``evergreen``) is older
   than any statement with a time of its own.
4. **A new value is not a version number.** A change gives the value it changed to ("moved
   to Thursday the 9th", "free delivery now starts at £35"); a version string (``v9.0.0``,
   ``ruff==0.3.0``, ``Python 3.12``) names a release, as documentation and changelogs do in
   every other line ("changed in v9.0.0"), not a value of a fact.

Each function returns why a pair stands aside (a short reason, for the trace) or ``None``
when the premise holds.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timedelta

from recalld.records import Memory
from recalld.text import says_change, states_value

DIRECT_SOURCE = "direct"
"""The source kind of a memory added as it was said: its storage time is when it was said."""
DOCUMENT_SOURCE = "file"
"""The source kind of an indexed file's chunks."""

SAME_DOCUMENT = "parts of one document"
NO_TIME = "no time of its own (ingestion order is not time)"
SAME_TIME = "stated at the same time"

_VERSION = re.compile(
    r"(?<![\w.])[vV]\d+(?:\.\d+)*(?:[-+][\w.]+)?(?!\w)"  # v9, v9.0.0, v2.1.0-rc1
    r"|(?<![\w.])\d+(?:\.\d+){2,}(?:[-+][\w.]+)?(?!\w)"  # 3.11.9, 24.2.0
    r"|[\w.-]+\s*(?:==|>=|<=|~=|!=|\^|@)\s*[vV]?\d[\w.*]*"  # ruff==0.3.0, pkg>=1.2
    r"|\b[A-Z][\w+#-]*\s+\d+\.\d+(?![\w.])"  # Python 3.12, Go 1.22
)
"""Version strings: a ``v`` and a number, three or more dotted parts, a pinned requirement,
or a capitalised name and a two-part number. Other two-part numbers are values ("bumped to
24.2", "the fee is 3.50"), and so are dates written with dots (``12.03.2024``)."""
_DATE = re.compile(r"\d{1,2}\.\d{1,2}\.\d{2,4}|\d{4}\.\d{1,2}\.\d{1,2}")
_NOT_NAMES = frozenset({"to", "from", "at", "by", "now", "then", "was", "is", "and", "or"})
"""Capitalised words that start a sentence rather than name a product ("To 0.1 now")."""


def stated_at(memory: Memory) -> datetime | None:
    """When a memory was stated: its event time, else its storage time for a memory added
    directly; ``None`` for one ingested from a source without a time of its own."""
    if memory.event_time is not None:
        return memory.event_time
    return memory.created_at if memory.source.kind == DIRECT_SOURCE else None


def same_document(a: Memory, b: Memory) -> bool:
    """Whether two memories are chunks of one indexed file."""
    return (
        a.source.kind == b.source.kind == DOCUMENT_SOURCE
        and a.source.path is not None
        and a.source.path == b.source.path
    )


def one_exchange(a: Memory, b: Memory, span: timedelta) -> bool:
    """Whether two memories are one exchange: turns of one session by two speakers (a
    ``role`` each, not the same), stated at most ``span`` apart: a statement and the reply
    that confirms it. A zero ``span`` finds none."""
    if not span or a.session_id is None or a.session_id != b.session_id:
        return False
    speakers = a.metadata.get("role"), b.metadata.get("role")
    if speakers[0] is None or speakers[1] is None or speakers[0] == speakers[1]:
        return False
    times = stated_at(a), stated_at(b)
    return times[0] is not None and times[1] is not None and abs(times[0] - times[1]) <= span


def in_order(a: Memory, b: Memory) -> tuple[Memory, Memory] | str:
    """``(older, newer)`` of two memories that can replace each other, or why they cannot
    (premises 1 and 3 of the module docstring)."""
    if same_document(a, b):
        return SAME_DOCUMENT
    times = stated_at(a), stated_at(b)
    if a.evergreen != b.evergreen:  # an undated standing fact and a dated statement
        dated = times[1] if a.evergreen else times[0]
        if dated is None:
            return NO_TIME
        return (a, b) if a.evergreen else (b, a)
    if times[0] is None or times[1] is None:
        return NO_TIME
    if times[0] == times[1]:
        return SAME_TIME
    return (a, b) if times[0] < times[1] else (b, a)


def without_versions(text: str) -> str:
    """``text`` with its version strings blanked (premise 4)."""

    def blank(match: re.Match[str]) -> str:
        found = match.group(0)
        if _DATE.fullmatch(found) or found.split()[0].lower() in _NOT_NAMES:
            return found
        return " "

    return _VERSION.sub(blank, text)


@functools.lru_cache(maxsize=8192)
def gives_new_value(text: str) -> bool:
    """Whether ``text`` says that something changed and names a value other than a version
    number (:func:`recalld.text.says_change`, :func:`recalld.text.states_value`). Cached by
    text, as :func:`recalld.text.gives_new_value` is."""
    return says_change(text) and states_value(without_versions(text))
