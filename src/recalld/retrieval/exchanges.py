"""A fact stated in an exchange changes in both of its turns, and a change stated in an
exchange is not replaced by its own confirmation.

In a conversation a fact is often stated twice within a minute: said, and confirmed by the
other speaker ("the standup moves to 9:30" / "Noted: standup at 9:30 from Monday").
When it later changes, the change is often close to one of the two and far from the other
(it repeats the confirmation's words, not the statement's), so knowledge updates, which
compare pairs, demote one and leave the other first. This module finds the other turn
(:func:`shared_by_exchange`). Likewise a change said and confirmed ("the dentist on the 4th
is cancelled, new date the 25th" / "Changed: the 25th") is stated by both turns: the
confirmation, newer by a minute, replaces the old date but not the change
(:func:`confirmed_changes`).

Premise: the two turns are one exchange (:func:`~recalld.retrieval.replacement.one_exchange`:
two speakers of one session, within ``kupdate_exchange_minutes``), next to each other among
the candidates of their session, and the turn is related to both the replaced memory and
what replaced it (``kupdate_related_similarity``), and older than the latter; neither of the
two only asks (a question states no fact to share: "which one do you recommend?" and its
answer). Turns without a session, a speaker or a time are never in an exchange.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np

from recalld.records import Memory
from recalld.retrieval.calibration import Calibration
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.replacement import gives_new_value, in_order, one_exchange, stated_at
from recalld.text import only_asks

QUESTION = "a question and its answer (a question states no fact to share)"


def shared_by_exchange(
    window: Sequence[Memory],
    pairs: np.ndarray,
    calibration: Calibration,
    stale: Mapping[str, Memory],
    config: RetrievalConfig,
    held: dict[str, int],
) -> dict[str, Memory]:
    """The other turns of the exchanges of ``stale`` memories, each -> what replaced it.
    ``pairs``: the raw cosines of every two memories of ``window``; ``held`` counts the
    exchanges left as they are because one turn only asks (for the trace)."""
    place = {m.id: i for i, m in enumerate(window)}
    span = config.updates.exchange_span
    shared: dict[str, Memory] = {}
    for old_id, new in stale.items():
        j, k = place[old_id], place[new.id]
        for i in adjacent(window, j):
            turn = window[i]
            if (
                turn.id in stale
                or turn.id == new.id
                or not one_exchange(turn, window[j], span)
                or calibration.lift(float(min(pairs[i, j], pairs[i, k])))
                < config.updates.kupdate_related_similarity
                or in_order(turn, new) != (turn, new)
            ):
                continue
            if _asks(turn) or _asks(window[j]):
                held[QUESTION] = held.get(QUESTION, 0) + 1
            else:
                shared.setdefault(turn.id, new)
    return shared


def _asks(memory: Memory) -> bool:
    return only_asks(memory.content, memory.tells_event)


def adjacent(window: Sequence[Memory], j: int) -> list[int]:
    """The places in ``window`` of the turns just before and just after ``window[j]`` in its
    session, by the time they were stated."""
    memory = window[j]
    when = stated_at(memory)
    if memory.session_id is None or when is None:
        return []
    before: tuple[datetime, int] | None = None
    after: tuple[datetime, int] | None = None
    for i, other in enumerate(window):
        at = stated_at(other)
        if i == j or other.session_id != memory.session_id or at is None:
            continue
        if at <= when and (before is None or at > before[0]):
            before = (at, i)
        if at >= when and (after is None or at < after[0]):
            after = (at, i)
    return [found[1] for found in (before, after) if found is not None]


def confirmed_changes(
    window: Sequence[Memory],
    pairs: np.ndarray,
    calibration: Calibration,
    stale: Mapping[str, Memory],
    config: RetrievalConfig,
) -> set[str]:
    """The ``stale`` memories that are a change confirmed, not replaced, by what replaced
    them: a turn that gives a new value ("the dentist on the 4th is cancelled; new date the
    25th"), related to an older memory that the same newer one replaces, in one exchange
    with that newer one ("Changed: new date the 25th"). The two state the new value
    together; the confirmation is no newer value of it."""
    place = {m.id: i for i, m in enumerate(window)}
    span = config.updates.exchange_span
    kept: set[str] = set()
    for changed_id, new in stale.items():
        i = place[changed_id]
        changed = window[i]
        if not one_exchange(changed, new, span) or not gives_new_value(changed.content):
            continue
        for old_id, replacer in stale.items():
            if (
                replacer.id == new.id
                and old_id != changed_id
                and calibration.lift(float(pairs[i, place[old_id]]))
                >= config.updates.kupdate_related_similarity
                and in_order(window[place[old_id]], changed) == (window[place[old_id]], changed)
            ):
                kept.add(changed_id)
                break
    return kept
