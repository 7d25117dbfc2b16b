"""Reads: a search request run through the pipeline, and the context block built on it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from recalld.errors import InvalidInputError
from recalld.providers.embedders import Embedder
from recalld.records import Context, Memory, SearchResult
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
    result = search(store, embedder, pipeline_request, config, clock(), models)
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
    chosen = fit_budget(result.hits, lambda h: estimate_tokens(line[h.memory.id]), budget)
    lines = [line[h.memory.id] for h in chosen]
    text = "\n".join(["[Memory Context]", *lines]) if lines else ""
    return Context(text, tuple(chosen), sum(estimate_tokens(x) for x in lines), budget)
