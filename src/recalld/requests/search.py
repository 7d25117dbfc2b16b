"""Requests that read: search, context and list, and the filters they share."""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
)

from recalld.records import (
    Granularity,
    MemoryFilter,
    MemoryType,
    SearchMode,
    TimeRange,
)
from recalld.request_limits import (
    MAX_CONTEXT_TOKENS,
    MAX_TAGS,
    MAX_TYPES,
    IdText,
    Tag,
)
from recalld.requests.base import (
    MAX_LIMIT,
    MAX_QUERY_CHARS,
    NOT_BLANK,
    Moment,
    RequestModel,
    as_utc,
    check_limit,
    check_mode,
    check_preset,
    check_query,
    check_types,
    whole,
)
from recalld.retrieval.config import PRESETS


class Filters(RequestModel):
    """Restrictions applied before ranking (search, context) or listing; all optional."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"project": "atlas", "tags": ["deploy"], "since": "2024-03-01"}]
        },
    )

    project: IdText | None = None
    """Only memories of this project."""
    scope: IdText | None = None
    """Only memories of this scope (``user``, or another scope name)."""
    types: tuple[MemoryType, ...] = Field(default=(), max_length=MAX_TYPES)
    """Only memories of these types."""
    tags: tuple[Tag, ...] = Field(default=(), max_length=MAX_TAGS)
    """Only memories carrying all of these tags (at most 64)."""
    session_id: IdText | None = None
    """Only memories of this session."""
    superseded_by: IdText | None = None
    """Only memories this memory supersedes (whose ``superseded_by`` is this id)."""
    since: Moment | None = None
    """Only memories whose reference time is at or after this (ISO date or datetime)."""
    until: Moment | None = None
    """Only memories whose reference time is before this."""

    _types = field_validator("types", mode="before")(check_types)

    def to_memory_filter(self, include_forgotten: bool = False) -> MemoryFilter:
        since, until = as_utc(self.since), as_utc(self.until)
        return MemoryFilter(
            project=self.project,
            scope=self.scope,
            types=self.types,
            tags=self.tags,
            session_id=self.session_id,
            superseded_by=self.superseded_by,
            time_range=TimeRange(since, until) if since or until else None,
            include_forgotten=include_forgotten,
        )


class _Ranked(RequestModel):
    """What search and context share."""

    query: str = Field(
        min_length=1, max_length=MAX_QUERY_CHARS, json_schema_extra={"pattern": NOT_BLANK}
    )
    """The question or keywords (up to 10,000 characters)."""
    mode: SearchMode = "auto"
    """``vector`` (semantic only), ``hybrid`` (every channel) or ``auto``."""
    filters: Filters = Field(default_factory=Filters)
    as_of: Moment | None = None
    """The reference time for relative dates and decay (default: now)."""
    boost_project: IdText | None = None
    """Rank this project's memories higher without filtering."""
    preset: str | None = Field(default=None, json_schema_extra={"enum": [*PRESETS, None]})
    """A named settings bundle (``fast``, ``balanced``, ``thorough``)."""

    _query = field_validator("query", mode="before")(check_query)
    _mode = field_validator("mode", mode="before")(check_mode)
    _preset = field_validator("preset", mode="before")(check_preset)


class SearchQuery(_Ranked):
    """A search: ranked memories for a question (:meth:`MemoryEngine.run_search`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"query": "when does my sister arrive?", "limit": 5},
                {
                    "query": "deploy checklist",
                    "limit": 3,
                    "filters": {"project": "atlas"},
                    "explain": True,
                },
            ]
        },
    )

    limit: StrictInt = Field(default=10, ge=1, le=MAX_LIMIT)
    """How many hits to return (1-1000)."""
    explain: StrictBool = False
    """Attach a trace (channels, fusion, adjustments) to each hit."""
    record_access: StrictBool = False
    """Count this search as an access of the returned memories."""
    granularity: Granularity = "memory"
    """``memory`` (each hit a memory) or ``session`` (one hit per session)."""
    near_misses: StrictInt = Field(default=0, json_schema_extra={"minimum": 0, "maximum": 100})
    """Also return this many of the next candidates below the hits (0-100), each traced
    and saying why it lost."""

    _limit = field_validator("limit", mode="before")(check_limit)

    @field_validator("near_misses", mode="before")
    @classmethod
    def _near_misses(cls, value: Any) -> Any:
        value = whole(value)
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= 100:
            raise ValueError("near_misses must be between 0 and 100")
        return value


class ContextQuery(_Ranked):
    """A prompt-ready block of the best memories under a token budget
    (:meth:`MemoryEngine.run_context`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"query": "what do I know about the deploy?", "max_tokens": 500}]
        },
    )

    max_tokens: StrictInt | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """The budget in tokens (default: the retrieval config's, 2000; at most 100,000)."""
    limit: StrictInt | None = Field(default=None, ge=1, le=MAX_LIMIT)
    """How many hits to consider (default: enough to fill the budget)."""
    explain: StrictBool = False
    """Attach a trace to each hit of the block (as for a search)."""

    _limit = field_validator("limit", mode="before")(check_limit)

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        value = whole(value)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError("max_tokens must be positive")
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_CONTEXT_TOKENS:
            raise ValueError(f"max_tokens must be at most {MAX_CONTEXT_TOKENS:,}")
        return value


class ListQuery(RequestModel):
    """Memories passing filters, newest first (:meth:`MemoryEngine.run_list`)."""

    limit: StrictInt = Field(default=50, ge=1)
    """How many memories (the HTTP API allows at most 1000 a page)."""
    offset: StrictInt = Field(default=0, ge=0)
    newest_first: StrictBool = True
    include_forgotten: StrictBool = False
    filters: Filters = Field(default_factory=Filters)

    _integers = field_validator("limit", "offset", mode="before")(whole)
