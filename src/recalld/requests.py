"""Request objects: what every interface (library, CLI, HTTP, MCP) turns its input into.

Each operation of the facade takes one of these (:meth:`recalld.MemoryEngine.execute`),
so input is checked in one place and the same bad input gets the same message whichever
door it came through. Build them with :func:`parse` (or the class's ``model_validate``
inside :func:`parse`): a :class:`pydantic.ValidationError` is turned into an
:class:`~recalld.errors.InvalidInputError` whose message :func:`describe_errors` writes.

The JSON shape of each request is its JSON schema (``SearchQuery.model_json_schema()``),
which is also what the HTTP API documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from recalld.errors import InvalidInputError
from recalld.records import IMPORT_FORMATS as IMPORT_FORMATS
from recalld.records import (
    MEMORY_TYPES,
    SEARCH_MODES,
    Granularity,
    MemoryFilter,
    MemoryType,
    NewMemory,
    SearchMode,
    Source,
    TimeRange,
)

MAX_LIMIT = 1000
"""The most hits a search (or memories a list) may ask for."""
ImportFormat = Literal["memories", "jsonl-transcript", "claude-code", "longmemeval", "locomo"]

Model = TypeVar("Model", bound=BaseModel)


def as_utc(moment: datetime | None) -> datetime | None:
    """Naive datetimes are taken as UTC."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# -- errors ----------------------------------------------------------------------------------


def describe_errors(errors: Iterable[Mapping[str, Any]], skip: Sequence[str] = ()) -> str:
    """One line for pydantic's error list: our own checks speak for themselves, pydantic's
    are prefixed by the field's dotted path. ``skip`` drops leading location parts (such as
    FastAPI's ``body``)."""
    parts: list[str] = []
    errors = list(errors)
    deeper = {tuple(e.get("loc", ()))[:1] for e in errors if len(e.get("loc", ())) > 1}
    for error in errors:
        if error.get("type") == "too_short" and tuple(error.get("loc", ())) in deeper:
            continue  # a list emptied by its refused items: the items' errors say it
        loc = [str(p) for p in error.get("loc", ())]
        while loc and skip and loc[0] in skip:
            loc = loc[1:]
        where = ".".join(loc)
        if error.get("type") == "value_error" and "error" in error.get("ctx", {}):
            text = str(error["ctx"]["error"])
            parts.append(f"{'.'.join(loc[:-1])}: {text}" if len(loc) > 1 else text)
        elif error.get("type") == "extra_forbidden":
            parts.append(f"unknown field {where}")
        elif error.get("type") == "missing":
            parts.append(f"{where} is required")
        else:
            parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else
                         str(error.get("msg", "invalid input")))  # fmt: skip
    return "; ".join(dict.fromkeys(parts)) or "invalid input"


def parse(model: type[Model], data: Any) -> Model:
    """``model`` validated from ``data`` (a mapping, or an instance passed through).

    Raises:
        InvalidInputError: with :func:`describe_errors`' message.
    """
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(describe_errors(exc.errors())) from None


# -- checks shared by several requests -------------------------------------------------------


def _check_types(value: Any) -> Any:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple):
        bad = [t for t in value if t not in MEMORY_TYPES]
        if bad:
            raise ValueError(
                f"unknown type(s) {', '.join(map(str, bad))}; use {', '.join(MEMORY_TYPES)}"
            )
    return value


def _check_query(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("the query is empty")
    return value.strip()


def _check_mode(value: Any) -> Any:
    if value not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}")
    return value


def _check_limit(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
    return value


def _check_preset(value: Any) -> Any:
    from recalld.retrieval.config import PRESETS

    if value is not None and (not isinstance(value, str) or value not in PRESETS):
        raise ValueError(f"unknown preset {value!r}; choose one of {', '.join(PRESETS)}")
    return value


def _check_memory_type(value: Any) -> Any:
    if value not in MEMORY_TYPES:
        raise ValueError(f"type must be one of {', '.join(MEMORY_TYPES)}")
    return value


def _check_range(name: str, low: float, high: float, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number")
    if not low <= value <= high:  # NaN fails too
        raise ValueError(f"{name} must be between {low} and {high}")
    return value


_FORBID = ConfigDict(extra="forbid", frozen=True)


class Filters(BaseModel):
    """Restrictions applied before ranking (search, context) or listing; all optional."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"examples": [{"project": "atlas", "tags": ["deploy"],
                                         "since": "2024-03-01"}]},
    )  # fmt: skip

    project: str | None = None
    """Only memories of this project."""
    scope: str | None = None
    """Only memories of this scope (``user``, or another scope name)."""
    types: tuple[MemoryType, ...] = ()
    """Only memories of these types."""
    tags: tuple[str, ...] = ()
    """Only memories carrying all of these tags."""
    session_id: str | None = None
    """Only memories of this session."""
    since: datetime | None = None
    """Only memories whose reference time is at or after this (ISO date or datetime)."""
    until: datetime | None = None
    """Only memories whose reference time is before this."""

    _types = field_validator("types", mode="before")(_check_types)

    def to_memory_filter(self, include_forgotten: bool = False) -> MemoryFilter:
        since, until = as_utc(self.since), as_utc(self.until)
        return MemoryFilter(
            project=self.project,
            scope=self.scope,
            types=self.types,
            tags=self.tags,
            session_id=self.session_id,
            time_range=TimeRange(since, until) if since or until else None,
            include_forgotten=include_forgotten,
        )


class _Ranked(BaseModel):
    """What search and context share."""

    model_config = _FORBID

    query: str = Field(min_length=1)
    """The question or keywords."""
    mode: SearchMode = "auto"
    """``vector`` (semantic only), ``hybrid`` (every channel) or ``auto``."""
    filters: Filters = Field(default_factory=Filters)
    as_of: datetime | None = None
    """The reference time for relative dates and decay (default: now)."""
    boost_project: str | None = None
    """Rank this project's memories higher without filtering."""
    preset: str | None = None
    """A named settings bundle (``fast``, ``balanced``, ``thorough``)."""

    _query = field_validator("query", mode="before")(_check_query)
    _mode = field_validator("mode", mode="before")(_check_mode)
    _preset = field_validator("preset", mode="before")(_check_preset)


class SearchQuery(_Ranked):
    """A search: ranked memories for a question (:meth:`MemoryEngine.run_search`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"examples": [
            {"query": "when does my sister arrive?", "limit": 5},
            {"query": "deploy checklist", "limit": 3, "filters": {"project": "atlas"},
             "explain": True},
        ]},
    )  # fmt: skip

    limit: int = 10
    """How many hits to return (1-1000)."""
    explain: bool = False
    """Attach a trace (channels, fusion, adjustments) to each hit."""
    record_access: bool = False
    """Count this search as an access of the returned memories."""
    granularity: Granularity = "memory"
    """``memory`` (each hit a memory) or ``session`` (one hit per session)."""

    _limit = field_validator("limit", mode="before")(_check_limit)


class ContextQuery(_Ranked):
    """A prompt-ready block of the best memories under a token budget
    (:meth:`MemoryEngine.run_context`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"examples": [{"query": "what do I know about the deploy?",
                                         "max_tokens": 500}]},
    )  # fmt: skip

    max_tokens: int | None = None
    """The budget in tokens (default: the retrieval config's, 2000)."""
    limit: int | None = None
    """How many hits to consider (default: enough to fill the budget)."""
    explain: bool = False
    """Attach a trace to each hit of the block (as for a search)."""

    _limit = field_validator("limit", mode="before")(_check_limit)

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError("max_tokens must be positive")
        return value


class ListQuery(BaseModel):
    """Memories passing filters, newest first (:meth:`MemoryEngine.run_list`)."""

    model_config = _FORBID

    limit: int = Field(default=50, ge=1)
    """How many memories (the HTTP API allows at most 1000 a page)."""
    offset: int = Field(default=0, ge=0)
    newest_first: bool = True
    include_forgotten: bool = False
    filters: Filters = Field(default_factory=Filters)


class MemoryFields(BaseModel):
    """The fields of a memory a caller may set (all but ``content`` optional)."""

    model_config = _FORBID

    type: MemoryType = "event"
    """``insight``, ``event``, ``raw``, ``turn`` or ``chunk``."""
    event_time: datetime | None = None
    """When it happened (ISO); search dates the memory by it."""
    priority: float = 1.0
    """1.0-2.0: how much to favour it."""
    pinned: bool = False
    evergreen: bool = False
    """Never decays."""
    significance: float = 0.5
    """0.0-1.0."""
    project: str | None = None
    scope: str = "user"
    session_id: str | None = None
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] | None = None
    """``null`` lets recalld extract them from the content."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Any JSON object, returned as given."""
    embed_context: str | None = None
    """Text embedded with the content but never shown or searched as words."""

    _type = field_validator("type", mode="before")(_check_memory_type)

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: Any) -> Any:
        return _check_range("priority", 1.0, 2.0, value)

    @field_validator("significance", mode="before")
    @classmethod
    def _significance(cls, value: Any) -> Any:
        return _check_range("significance", 0.0, 1.0, value)

    @field_validator("tags", "entities", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if value is not None and not (
            isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        ):
            raise ValueError("tags and entities must be lists of strings")
        return value


class MemoryIn(MemoryFields):
    """One memory to store."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"examples": [
            {"content": "My sister Ana arrives on 14 March.", "tags": ["family"]},
        ]},
    )  # fmt: skip

    content: str
    """The text to remember (up to the store's limit, 100,000 characters by default)."""
    id: str | None = None
    """Give an id to make re-adding idempotent; ``null`` generates one."""
    namespace: str | None = None
    """A shared namespace granted to the caller's tenant; ``null``: the tenant's own."""

    def to_new(self) -> NewMemory:
        return NewMemory(
            content=self.content, type=self.type, event_time=self.event_time,
            priority=self.priority, pinned=self.pinned, evergreen=self.evergreen,
            significance=self.significance, project=self.project, scope=self.scope,
            session_id=self.session_id, source=Source(), tags=self.tags,
            entities=self.entities, metadata=dict(self.metadata), id=self.id,
            embed_context=self.embed_context, namespace=self.namespace,
        )  # fmt: skip


class AddMemories(BaseModel):
    """Memories to store together; nothing is stored if one is refused
    (:meth:`MemoryEngine.run_add`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"examples": [{"memories": [
            {"content": "I moved to Berlin in March 2024.", "type": "event"},
            {"content": "Prefers tea over coffee.", "type": "insight"},
        ]}]},
    )  # fmt: skip

    memories: tuple[MemoryIn, ...] = Field(min_length=1)
    dedupe: bool = True
    """Content identical to a live memory in the same scope, project and session is not
    stored again (its result names the existing id)."""


NOT_NULL = frozenset(
    {
        "content",
        "type",
        "priority",
        "pinned",
        "evergreen",
        "significance",
        "scope",
        "tags",
        "metadata",
    }
)
"""Fields of a memory that always have a value: a patch may change them, not clear them."""


class MemoryPatch(BaseModel):
    """Fields to change on a memory; those not given are kept. New content is re-embedded."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"examples": [{"content": "Ana arrives on 15 March.",
                                         "tags": ["family", "travel"]}]},
    )  # fmt: skip

    content: str | None = None
    type: MemoryType | None = None
    event_time: datetime | None = None
    priority: float | None = None
    pinned: bool | None = None
    evergreen: bool | None = None
    significance: float | None = None
    project: str | None = None
    scope: str | None = None
    session_id: str | None = None
    tags: tuple[str, ...] | None = None
    entities: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = None
    embed_context: str | None = None

    @field_validator("type", "priority", "significance", "tags", "entities", mode="before")
    @classmethod
    def _checked(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return value
        if info.field_name == "type":
            return _check_memory_type(value)
        if info.field_name in ("tags", "entities"):
            return MemoryFields._strings(value)
        low, high = (1.0, 2.0) if info.field_name == "priority" else (0.0, 1.0)
        return _check_range(str(info.field_name), low, high, value)

    @model_validator(mode="after")
    def _no_null_for_required(self) -> MemoryPatch:
        for name in sorted(self.model_fields_set & NOT_NULL):
            if getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null (leave it out to keep it)")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields the caller gave (``null`` clears an optional field)."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class UpdateMemory(BaseModel):
    """Change one memory (:meth:`MemoryEngine.run_update`)."""

    model_config = _FORBID

    id: str = Field(min_length=1)
    changes: MemoryPatch


class GetMemory(BaseModel):
    """One memory by id (:meth:`MemoryEngine.get`)."""

    model_config = _FORBID

    id: str = Field(min_length=1)


class ForgetMemories(BaseModel):
    """Hide memories from search, or delete them (:meth:`MemoryEngine.run_forget`)."""

    model_config = _FORBID

    ids: tuple[str, ...] = Field(min_length=1)
    hard: bool = False
    """Delete for good instead of hiding."""

    @field_validator("ids", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class ImportRequest(BaseModel):
    """Import a file's memories or a transcript (:meth:`MemoryEngine.run_import`): one
    entry point for every format. Give ``path`` (a file the process can read, ``.gz``
    fine) or ``content`` (the file's bytes or text)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: ImportFormat = "memories"
    path: str | None = None
    content: bytes | None = None
    strict: bool = False
    """Refuse the whole input, storing nothing, when any line is bad; by default bad lines
    are reported by number and skipped, and the rest stored."""

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        if value not in IMPORT_FORMATS:
            raise ValueError(f"format must be one of {', '.join(IMPORT_FORMATS)}")
        return value

    @field_validator("content", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> Any:
        return value.encode("utf-8") if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> ImportRequest:
        if (self.path is None) == (self.content is None):
            raise ValueError("give either a path or the content to import, not both")
        return self


Request = (SearchQuery | ContextQuery | ListQuery | AddMemories | UpdateMemory | GetMemory
           | ForgetMemories | ImportRequest)  # fmt: skip
"""Every request :meth:`MemoryEngine.execute` takes."""
