"""Follow a fact forward: the newer memory that replaces a top hit joins the candidates.

Knowledge updates (:func:`recalld.retrieval.adjust.knowledge_updates`) can only put the
current value of a fact first when that value is among the top candidates. An update often
shares few words with the question ("when does my sister arrive?": "her flight got moved,
she now lands on the 14th") while it is close to the fact it replaces. So each of the top
``kupdate_follow`` hits looks for newer memories near itself (a vector search with its own
vector, under the request's filters) that say it changed, by the rules of knowledge updates;
such a memory scores at least as much as the hit it replaces, and the knowledge-update stage
then demotes the older one below it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from recalld.records import Memory, MemoryFilter
from recalld.retrieval.adjust import Scored, other_projects, same_subject, sooner
from recalld.retrieval.calibration import UNCALIBRATED, Calibration
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused
from recalld.stores.base import CandidateRequest, NearestAsk, Store
from recalld.text import gives_new_value


def follow_updates(
    scored: list[Scored],
    vectors: dict[str, np.ndarray],
    store: Store,
    filters: MemoryFilter,
    config: RetrievalConfig,
    cosines: Mapping[str, float],
    calibration: Calibration = UNCALIBRATED,
) -> list[Scored]:
    """``scored`` with the memories that replace its top hits lifted to their scores (or
    added). ``cosines`` are the candidates' query cosines; the vectors of the memories
    added go into ``vectors``, for the knowledge-update stage. Similarities are on the
    embedder's ``calibration`` scale, ``cosines`` included."""
    if config.kupdate_factor >= 1.0:
        return scored
    leaders = [s for s in scored[: config.kupdate_follow] if s.memory.id in vectors]
    offers: dict[str, list[tuple[Scored, float]]] = {}
    rows: dict[str, Memory] = {}
    near_vectors: dict[str, np.ndarray] = {}
    for old in leaders:
        nearest = NearestAsk(config.kupdate_follow_pool, vectors[old.memory.id],
                             near_memory=True)  # fmt: skip
        request = CandidateRequest(filters, {"semantic": nearest})
        found = store.search_rows([request], vectors=True)  # one call: rows and vectors too
        rows.update(found.memories)
        near_vectors.update(found.vectors)
        for near in found.channels[0].get("semantic", ()):
            similarity = calibration.lift(near.score)
            if near.memory_id != old.memory.id and similarity >= config.kupdate_related_similarity:
                offers.setdefault(near.memory_id, []).append((old, similarity))
    present = {s.memory.id: s for s in scored}
    unread = [i for i in offers if i not in present and i not in rows]
    if unread:  # a backend in the same process reads rows and vectors on demand
        rows.update((m.id, m) for m in store.get_many(unread))
    unvectored = [i for i in offers if i not in near_vectors]
    if unvectored:
        near_vectors.update(store.vectors_for(unvectored))
    chosen: dict[str, Scored] = {}
    for memory_id, pairs in offers.items():
        new = present[memory_id].memory if memory_id in present else rows.get(memory_id)
        if new is None:
            continue
        replaced = [old for old, cos in pairs if _replaces(new, old.memory, cos, cosines, config)]
        if replaced and memory_id in near_vectors:
            chosen[memory_id] = max(replaced, key=lambda old: old.score)
            vectors.setdefault(memory_id, np.asarray(near_vectors[memory_id]))
    if not chosen:
        return scored
    out = []
    for item in scored:
        lender = chosen.get(item.memory.id)
        if lender is not None and lender.score > item.score:
            lift = lender.score / item.score if item.score else 1.0
            item = Scored(item.memory, item.fused, lender.score,
                          {**item.factors, "update_of_top_hit": lift})  # fmt: skip
        out.append(item)
    for memory_id, lender in chosen.items():
        if memory_id not in present:
            fused = Fused(memory_id, 0.0, {f"update_of:{lender.memory.id}": lender.score})
            out.append(Scored(rows[memory_id], fused, lender.score, {}))
    return sorted(out, key=lambda s: -s.score)


def _replaces(
    new: Memory, old: Memory, cosine: float, cosines: Mapping[str, float],
    config: RetrievalConfig,
) -> bool:  # fmt: skip
    """Whether ``new`` is a newer value of ``old``'s fact: later, not another project's,
    and it says that something changed on ``old``'s subject, giving the new value (a
    number, a date, a time, a version: :func:`recalld.text.states_value`). A restatement
    is not followed, nor a change without a value ("you're now helping others"): in a
    conversation those are more often the same story told again than a fact that changed.
    """
    if not sooner(old, new) or other_projects(old, new) or not gives_new_value(new.content):
        return False
    return same_subject(old.id, new.id, cosine, cosines, config)
