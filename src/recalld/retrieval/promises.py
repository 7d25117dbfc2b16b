"""Stage 6b: what a user stated is a rule, not a factor.

A user who says "this replaces that" (``supersede OLD --by NEW``), "this holds until then"
(``valid_until``) or "forget this" has made a statement about the results, not given a hint
to weigh against the others. These are enforced here, after every score is computed, as
constraints on the ranking; the factors of the earlier stages never override them:

* **forget**: a forgotten memory is never a result (the store's filters leave it out;
  this stage also drops one that any stage brought in from outside them).
* **supersede**: a memory replaced by another never ranks above the memory that now holds
  its fact, its *current successor* (the end of its chain of replacements: not itself
  replaced, not past its ``valid_until``, not forgotten, and passing the search's filters).
  The successor takes the replaced memory's place (the score the replaced one would have
  had were it current), and the replaced one sits under it, its own score x
  ``superseded_factor``; with ``superseded="hide"`` it is left out. When the successor is
  not among the candidates it is brought in at that place: someone who said "this
  replaces that" expects the replacement where the replaced fact would have been.
  :func:`promised_order` keeps the order through the diversity stage, which picks hits by
  more than their scores.
* **valid_until** alone (no successor named): past it the memory is no longer current
  (x ``superseded_factor``, or left out with ``hide``); nothing is named to put above it.

Invariants: after :func:`keep_promises`, every memory with a current successor in the list
has a lower score than that successor; after :func:`promised_order`, it comes after it in
the hits. Each move is written in the trace (``Trace.promises``), with the factor it took.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from recalld.records import Memory, MemoryFilter
from recalld.retrieval.adjust import Scored, is_superseded
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused

Lookup = Callable[[list[str]], Mapping[str, Memory]]
"""Memories by id (those the store lets this search see; unknown ids left out)."""

MAX_CHAIN = 32
"""Replacements followed from one memory to its current successor: a longer chain (or a
loop, A replaced by B replaced by A) is treated as having no current successor."""

UNDER = 1.0 - 1e-9
"""A replaced memory that would reach its successor's score takes this share of it: just
under, so that it stays next to its successor rather than sinking below unrelated hits."""


@dataclass(frozen=True)
class Kept:
    """The ranking with the promises kept, and each replaced memory's current successor."""

    scored: list[Scored]
    successors: Mapping[str, str]
    """Replaced memory id -> its current successor's id (both in ``scored``)."""


def keep_promises(
    scored: list[Scored],
    lookup: Lookup,
    filters: MemoryFilter,
    reference: datetime,
    config: RetrievalConfig,
) -> Kept:
    """``scored`` with forgotten memories dropped and every superseded memory under its
    current successor (brought in when the search did not find it); re-sorted."""
    if not filters.include_forgotten:
        scored = [s for s in scored if s.memory.forgotten_at is None]
    marked = [s for s in scored if is_superseded(s.memory, reference)]
    if not marked:
        return Kept(scored, {})
    present = {s.memory.id: s for s in scored}
    current = current_successors([s.memory for s in marked], lookup, filters, reference)
    places: dict[str, tuple[float, str]] = {}  # successor -> (its place, what it replaces)
    for item in marked:
        successor = current.get(item.memory.id)
        if successor is not None and places.get(successor.id, (-1.0, ""))[0] < item.score:
            places[successor.id] = (item.score, item.memory.id)
    by_id = {m.id: m for m in current.values()}
    out = dict(present)
    for successor_id, (place, old_id) in places.items():
        out[successor_id] = _in_place(present.get(successor_id), by_id[successor_id], place, old_id)
    for item in marked:
        if config.promises.superseded == "hide":
            del out[item.memory.id]
            continue
        successor = current.get(item.memory.id)
        above = None if successor is None else out[successor.id].score
        out[item.memory.id] = _under(item, successor, above, config)
    successors = {old: s.id for old, s in current.items() if old in out}
    return Kept(sorted(out.values(), key=lambda s: -s.score), successors)


def current_successors(
    memories: Sequence[Memory], lookup: Lookup, filters: MemoryFilter, reference: datetime
) -> dict[str, Memory]:
    """Each memory's current successor (see the module), for those that have one."""
    known: dict[str, Memory] = {}
    found: dict[str, Memory] = {}
    for memory in memories:
        step, seen = memory, {memory.id}
        while step.superseded_by is not None and len(seen) <= MAX_CHAIN:
            following = step.superseded_by
            if following in seen:
                break  # a loop: no memory of it is current
            if following not in known:
                known.update(lookup([following]))
            if following not in known:
                break  # deleted, or another tenant's
            step = known[following]
            seen.add(step.id)
        if step.id != memory.id and _current(step, filters, reference):
            found[memory.id] = step
    return found


def _current(memory: Memory, filters: MemoryFilter, reference: datetime) -> bool:
    """Whether ``memory`` holds its fact now and this search may show it."""
    return (
        not is_superseded(memory, reference)
        and memory.forgotten_at is None
        and passes(memory, filters)
    )


def passes(memory: Memory, filters: MemoryFilter) -> bool:
    """Whether ``memory`` passes ``filters`` (the store's own filters, read in Python)."""
    equal = ("project", "scope", "session_id", "superseded_by")
    window = filters.time_range
    return (
        all(getattr(filters, f) is None or getattr(memory, f) == getattr(filters, f) for f in equal)
        and (not filters.types or memory.type in filters.types)
        and all(tag in memory.tags for tag in filters.tags)
        and (window is None or window.contains(memory.reference_time))
        and (filters.include_forgotten or memory.forgotten_at is None)
    )


def _in_place(item: Scored | None, successor: Memory, place: float, old_id: str) -> Scored:
    """The successor at ``place`` at least (the replaced memory's score before it was
    marked), brought in when the search did not find it."""
    if item is None:
        fused = Fused(successor.id, place, {f"in_place_of:{old_id}": place})
        why = (
            f"brought in: it replaces {old_id} (supersede), which the search found; "
            "it takes that memory's place"
        )
        return Scored(successor, fused, place, {}, (why,))
    if item.score >= place:
        return item
    why = f"lifted to the place of {old_id}, which it replaces (supersede)"
    factors = {**item.factors, "in_place_of_replaced": place / item.score if item.score else 1.0}
    return replace(item, score=place, factors=factors, promises=(*item.promises, why))


def _under(
    item: Scored,
    successor: Memory | None,
    above: float | None,
    config: RetrievalConfig,
) -> Scored:
    """A replaced memory demoted, and under its successor's score ``above`` when it has
    one."""
    factors = {**item.factors, "superseded": config.promises.superseded_factor}
    score = item.score * config.promises.superseded_factor
    memory = item.memory
    if successor is not None and above is not None:
        why = f"replaced by {successor.id} (supersede): never ranked above it"
        if score >= above * UNDER:
            factors["under_its_replacement"] = above * UNDER / score if score else 1.0
            score = above * UNDER
    elif memory.superseded_by is not None:
        why = (
            f"replaced by {memory.superseded_by} (supersede), which is not current or not "
            "visible to this search: demoted only"
        )
    else:
        until = memory.valid_until.isoformat() if memory.valid_until else "?"
        why = f"no longer current since {until} (valid_until): demoted"
    return replace(item, score=score, factors=factors, promises=(*item.promises, why))


def promised_order(
    chosen: list[Scored], pool: Sequence[Scored], successors: Mapping[str, str], limit: int
) -> list[Scored]:
    """The hits with each replaced memory after its current successor: moved just under it
    when the diversity stage picked it first, and the successor (from ``pool``) put just
    above it when the diversity stage passed the successor over; the first ``limit``."""
    if not successors or not any(s.memory.id in successors for s in chosen):
        return chosen
    by_id = {s.memory.id: s for s in pool}
    out = list(chosen)
    for item in chosen:
        successor_id = successors.get(item.memory.id)
        if successor_id is None or successor_id not in by_id:
            continue
        ids = [s.memory.id for s in out]
        at = ids.index(item.memory.id)
        if successor_id in ids:
            if ids.index(successor_id) > at:
                out.pop(at)
                out.insert(ids.index(successor_id), item)
        else:
            out.insert(at, by_id[successor_id])
    return out[:limit]


KEPT_AS_REPLACEMENT = "kept: it replaces a hit (supersede)"


def carried(chosen: Sequence[Scored], reasons: Mapping[str, str]) -> dict[str, str]:
    """Why a successor :func:`promised_order` put among the hits is there, where the
    relevance filter had dropped it."""
    return {
        s.memory.id: KEPT_AS_REPLACEMENT
        for s in chosen
        if reasons.get(s.memory.id, "").startswith("dropped")
    }
