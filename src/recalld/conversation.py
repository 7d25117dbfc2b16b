"""Conversation turns as memories: the context a short turn is embedded with.

A short reply ("Yes, contemporary is my top pick!") means little alone; the turn it answers
gives its vector the missing subject. Long turns stand on their own and keep a vector of
their own words. The context is embedded only: it is neither shown nor searched as words
(see :attr:`recalld.records.Memory.embed_context`).
"""

from __future__ import annotations

SHORT_TURN_CHARS = 300
"""Turns up to this long borrow the previous turn as context (LoCoMo turns are ~100
characters; most LongMemEval turns are far longer and are left alone)."""
CONTEXT_CHARS = 300
"""How much of the previous turn is borrowed: its end, which is what a reply answers."""


def reply_context(previous: str | None, current: str) -> str | None:
    """The ``embed_context`` for ``current``: the tail of ``previous`` when ``current`` is short."""
    if not previous or len(current) > SHORT_TURN_CHARS:
        return None
    tail = previous.strip()[-CONTEXT_CHARS:]
    return tail or None
