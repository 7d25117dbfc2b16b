"""Reads: a search request run through the pipeline, and the context block built on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from recalld.errors import InvalidInputError
from recalld.operations.collections import collection_lines, hits_catalog, label_hits
from recalld.providers.embedders import Embedder
from recalld.records import Context, Hit, Memory, SearchResult
from recalld.requests import MAX_LIMIT, ContextQuery, SearchQuery, as_utc
from recalld.retrieval.assemble import fit_budget
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.context_block import context_line, successors_in_context
from recalld.retrieval.models import Models
from recalld.retrieval.pipeline import SearchRequest, search
from recalld.stores.base import Store
from recalld.text import estimate_tokens

CONTEXT_MIN_HITS = 50
"""``context()`` considers at least this many hits, and one more per
``CONTEXT_TOKENS_PER_HIT`` tokens of budget, so that a budget is filled even when memories
are short (a chat turn is 20-40 tokens): 2000 tokens draw on 125 hits."""
CONTEXT_TOKENS_PER_HIT = 16
COLLECTIONS_HEADING = "[Collections]"
"""Heads the lines describing the collections the block's file hits come from (each line
once, however many of its files are in the block)."""
MEMORIES_HEADING = "[Memories]"
"""Heads the hits when a collections part precedes them."""
FIT_ROUNDS = 4
"""Refits of the hits under the collections' lines: a refit with less room can swap in a
hit of another collection, rarely more than once."""
FILTER_ARGS = ("project", "scope", "types", "tags", "session_id", "superseded_by", "since", "until")
"""The keyword arguments of :meth:`MemoryEngine.search` that are :class:`Filters`."""


def filter_args(**given: Any) -> dict[str, Any]:
    """The filter keywords given, as :class:`~recalld.requests.Filters` input."""
    unknown = sorted(set(given) - set(FILTER_ARGS))
    if unknown:
        raise InvalidInputError(f"unknown filter(s) {', '.join(unknown)}")
    return {k: v for k, v in given.items() if v is not None and v != () and v != []}


def run_search(
    store: Store,
    embedder: Embedder,
    request: SearchQuery,
    config: RetrievalConfig,
    clock: Callable[[], datetime],
    models: Models | None,
) -> SearchResult:
    """The pipeline's answer to ``request``; the hits' accesses are counted when asked."""
    pipeline_request = SearchRequest(
        query=request.query,
        limit=request.limit,
        mode=request.mode,
        filters=request.filters.to_memory_filter(),
        as_of=as_utc(request.as_of),
        project=request.boost_project or request.filters.project,
        explain=request.explain,
        granularity=request.granularity,
        near_misses=request.near_misses,
    )
    result = label_hits(store, search(store, embedder, pipeline_request, config, clock(), models))
    if request.record_access and result.hits:
        store.record_access([h.memory.id for h in result.hits], clock())
    return result


def run_context(
    store: Store,
    request: ContextQuery,
    default_budget: int,
    run: Callable[[SearchQuery], SearchResult],
    clock: Callable[[], datetime],
) -> Context:
    """The best memories for ``request`` (searched with ``run``) that fit its budget."""
    budget = default_budget if request.max_tokens is None else request.max_tokens
    if budget < 1:
        raise InvalidInputError("max_tokens must be positive")
    limit = request.limit or min(MAX_LIMIT, max(CONTEXT_MIN_HITS, budget // CONTEXT_TOKENS_PER_HIT))
    fields = request.model_dump(exclude={"max_tokens", "limit"})
    query = SearchQuery.model_validate({**fields, "filters": request.filters, "limit": limit})
    result = run(query)

    def lookup(ids: list[str]) -> dict[str, Memory]:
        """The memories of ``ids`` this store's tenant sees, by id."""
        return {m.id: m for m in store.get_many(ids)}

    # A replaced fact is marked with what replaced it (see recalld.retrieval.context_block).
    reference = as_utc(query.as_of) or clock()
    memories = [h.memory for h in result.hits]
    successors = successors_in_context(
        memories, lookup, query.filters.to_memory_filter(), reference
    )
    line = {m.id: context_line(m, successors.get(m.id), reference) for m in memories}
    for hit in result.hits:
        if hit.collection is not None:  # which file of which collection, before its text
            where = f"[{hit.collection.name}/{hit.collection.path}] "
            line[hit.memory.id] = "- " + where + line[hit.memory.id][2:]
    chosen, header = _fit_with_collections(store, result.hits, line, budget)
    lines = [line[h.memory.id] for h in chosen]
    if header:
        lines = [COLLECTIONS_HEADING, *header, MEMORIES_HEADING, *lines]
    text = "\n".join(["[Memory Context]", *lines]) if chosen else ""
    used = sum(estimate_tokens(x) for x in lines) if chosen else 0
    return Context(text, tuple(chosen), used, budget)


def _fit_with_collections(
    store: Store, hits: Sequence[Hit], line: dict[str, str], budget: int
) -> tuple[list[Hit], list[str]]:
    """The hits that fit ``budget`` with the lines of their collections (said once, above
    the hits): the collections' lines are paid for first, and the hits refitted in what is
    left until the lines they need are those paid for."""
    tokens = {h.memory.id: estimate_tokens(line[h.memory.id]) for h in hits}
    cost: Callable[[Hit], int] = lambda h: tokens[h.memory.id]  # noqa: E731
    headings = [COLLECTIONS_HEADING, MEMORIES_HEADING]
    catalog = hits_catalog(store, hits)
    spent = 0
    for _ in range(FIT_ROUNDS):
        chosen = fit_budget(hits, cost, max(budget - spent, 0))
        header = collection_lines(catalog, chosen) if catalog else []
        need = sum(estimate_tokens(x) for x in [*header, *headings]) if header else 0
        if need <= spent:
            return chosen, header
        spent = need
    return chosen, []  # fitted within budget - spent: without the lines it fits
