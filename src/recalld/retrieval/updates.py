"""Follow a fact forward: the newer memory that replaces a top hit joins the candidates.

Knowledge updates (:func:`recalld.retrieval.adjust.knowledge_updates`) can only put the
current value of a fact first when that value is among the top candidates. An update often
shares few words with the question ("when does my sister arrive?": "her flight got moved,
she now lands on the 14th") while it is close to the fact it replaces. So each of the top
``kupdate_follow`` hits looks for newer memories near itself (a vector search with its own
vector, under the request's filters) that say it changed, by the rules of knowledge updates;
such a memory scores at least as much as the hit it replaces, and the knowledge-update stage
then demotes the older one below it.

Premises: the two can replace each other (:mod:`recalld.retrieval.replacement`: not parts
of one document, stated at different real times, a new value that is
not a version number); and the newer memory has evidence of its own for the query: it is a
candidate (in a channel's list) or it contains one of the query's words. A memory that is
only near a top hit is not lifted to that hit's score. What stands aside is counted in the
search's ``stood_aside`` under ``update_follow``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from recalld.records import Memory, MemoryFilter
from recalld.retrieval.adjust import (
    Scored,
    held_back,
    one_thread,
    other_projects,
    same_subject,
)
from recalld.retrieval.calibration import UNCALIBRATED, Calibration
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused
from recalld.retrieval.replacement import gives_new_value, in_order
from recalld.stores.base import CandidateRequest, NearestAsk, Store
from recalld.text import words

NO_EVIDENCE = "no evidence of its own for the query (in no channel's list, no query word)"


def follow_updates(
    scored: list[Scored],
    vectors: dict[str, np.ndarray],
    store: Store,
    filters: MemoryFilter,
    config: RetrievalConfig,
    cosines: Mapping[str, float],
    calibration: Calibration = UNCALIBRATED,
    terms: Collection[str] = (),
    aside: dict[str, str] | None = None,
) -> list[Scored]:
    """``scored`` with the memories that replace its top hits lifted to their scores (or
    added). ``cosines`` are the candidates' query cosines; the vectors of the memories
    added go into ``vectors``, for the knowledge-update stage. Similarities are on the
    embedder's ``calibration`` scale, ``cosines`` included. ``terms``: the query's words,
    the evidence a memory outside the candidates needs; ``aside``: the search's
    ``stood_aside``, told what was left out and why."""
    if config.updates.kupdate_factor >= 1.0:
        return scored
    leaders = [s for s in scored[: config.updates.kupdate_follow] if s.memory.id in vectors]
    offers: dict[str, list[tuple[Scored, float]]] = {}
    rows: dict[str, Memory] = {}
    near_vectors: dict[str, np.ndarray] = {}
    for old in leaders:
        nearest = NearestAsk(
            config.updates.kupdate_follow_pool, vectors[old.memory.id], near_memory=True
        )
        request = CandidateRequest(filters, {"semantic": nearest})
        found = store.search_rows([request], vectors=True)  # one call: rows and vectors too
        rows.update(found.memories)
        near_vectors.update(found.vectors)
        for near in found.channels[0].get("semantic", ()):
            similarity = calibration.lift(near.score)
            if (
                near.memory_id != old.memory.id
                and similarity >= config.updates.kupdate_related_similarity
            ):
                offers.setdefault(near.memory_id, []).append((old, similarity))
    present = {s.memory.id: s for s in scored}
    unread = [i for i in offers if i not in present and i not in rows]
    if unread:  # a backend in the same process reads rows and vectors on demand
        rows.update((m.id, m) for m in store.get_many(unread))
    unvectored = [i for i in offers if i not in near_vectors]
    if unvectored:
        near_vectors.update(store.vectors_for(unvectored))
    candidates = {i: present[i].memory if i in present else rows.get(i) for i in offers}
    chosen, held = _choose(offers, candidates, set(present), terms, cosines, config)
    for memory_id in chosen:
        if memory_id in near_vectors:
            vectors.setdefault(memory_id, np.asarray(near_vectors[memory_id]))
    chosen = {i: lender for i, lender in chosen.items() if i in near_vectors}
    if held and aside is not None:
        aside["update_follow"] = held_back(held)
    if not chosen:
        return scored
    out = []
    for item in scored:
        lender = chosen.get(item.memory.id)
        if lender is not None and lender.score > item.score:
            lift = lender.score / item.score if item.score else 1.0
            item = Scored(
                item.memory, item.fused, lender.score, {**item.factors, "update_of_top_hit": lift}
            )
        out.append(item)
    for memory_id, lender in chosen.items():
        if memory_id not in present:
            fused = Fused(memory_id, 0.0, {f"update_of:{lender.memory.id}": lender.score})
            out.append(Scored(rows[memory_id], fused, lender.score, {}))
    return sorted(out, key=lambda s: -s.score)


def _choose(
    offers: Mapping[str, list[tuple[Scored, float]]],
    memories: Mapping[str, Memory | None],
    present: Collection[str],
    terms: Collection[str],
    cosines: Mapping[str, float],
    config: RetrievalConfig,
) -> tuple[dict[str, Scored], dict[str, int]]:
    """Each offered memory that replaces a top hit -> the best hit it replaces; and how many
    stood aside, by reason."""
    chosen: dict[str, Scored] = {}
    held: dict[str, int] = {}
    wanted = set(terms)
    for memory_id, pairs in offers.items():
        new = memories.get(memory_id)
        if new is None:
            continue
        reasons = [_replaces(new, old.memory, cos, cosines, config) for old, cos in pairs]
        replaced = [old for (old, _), why in zip(pairs, reasons, strict=True) if why is True]
        if replaced and memory_id not in present and not wanted & _bare_words(new.content):
            reasons = [NO_EVIDENCE]
            replaced = []
        for why in reasons:
            if isinstance(why, str):
                held[why] = held.get(why, 0) + 1
        if replaced:
            chosen[memory_id] = max(replaced, key=lambda old: old.score)
    return chosen, held


def _bare_words(text: str) -> set[str]:
    """The words of ``text``, a possessive's own form too ("Ana's" is also "ana")."""
    found = set(words(text))
    return found | {w.removesuffix("'s") for w in found}


def _replaces(
    new: Memory,
    old: Memory,
    cosine: float,
    cosines: Mapping[str, float],
    config: RetrievalConfig,
) -> bool | str:
    """Whether ``new`` is a newer value of ``old``'s fact (True), or why it cannot be when it
    would be but for a premise (a reason), or not (False): it can replace ``old`` and is the
    later, not another project's, and it says that something changed on ``old``'s subject,
    giving the new value (a number, a date, a time; not a version number). A restatement is
    not followed, nor a change without a value ("you're now helping others"): in a
    conversation those are more often the same story told again than a fact that changed.
    """
    thread = config.updates.kupdate_thread_subject and one_thread(old, new)
    if other_projects(old, new) or not same_subject(
        old.id, new.id, cosine, cosines, config, thread
    ):
        return False
    order = in_order(old, new)
    if isinstance(order, str):
        return order if gives_new_value(new.content) else False
    return order[1] is new and gives_new_value(new.content)
