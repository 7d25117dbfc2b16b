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

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from recalld.errors import InvalidInputError
from recalld.records import (
    IMPORT_FORMATS as IMPORT_FORMATS,
    MEMORY_TYPES,
    SEARCH_MODES,
    TYPES_ACCEPTED,
    Granularity,
    MemoryFilter,
    MemoryType,
    NewMemory,
    SearchMode,
    Source,
    TimeRange,
    stored_type,
)
from recalld.request_limits import (
    MAX_CONTEXT_TOKENS,
    MAX_EMBED_CHARS,
    MAX_IDS,
    MAX_TAGS,
    MAX_TYPES,
    EmbedContext,
    Entities,
    IdText,
    Metadata,
    Tag,
    Tags,
    check_embed_chars,
    embed_chars,
)
from recalld.retrieval.config import PRESETS

MAX_LIMIT = 1000
"""The most hits a search (or memories a list) may ask for."""
MAX_QUERY_CHARS = 10_000
"""The longest query a search or context takes: a question or its key words fit many times
over, and ranking a much longer text would hold a core for seconds."""
DATE_WORDS = "an ISO date or datetime such as 2024-03-14 or 2024-03-14T09:30"
NOT_BLANK = r"\S"
"""The JSON schema pattern of a text that must not be blank (a non-space character)."""
NOTHING_TO_CHANGE = "nothing to change: give at least one field"
ImportFormat = Literal["memories", "jsonl-transcript", "claude-code", "longmemeval", "locomo"]

Model = TypeVar("Model", bound=BaseModel)


def as_utc(moment: datetime | None) -> datetime | None:
    """Naive datetimes are taken as UTC."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


EARLIEST = datetime(2, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)
"""The dates a caller may name (``as_of``, ``since``, ``until``, ``event_time``): a year
inside each end of what Python's ``datetime`` holds, so that the windows and offsets
computed around them ("last december", "two days ago", a zone's offset) stay
representable instead of overflowing."""


def check_moment(moment: datetime, name: str) -> datetime:
    """``moment`` if it lies between :data:`EARLIEST` and :data:`LATEST`.

    Raises:
        ValueError: a clear message naming ``name`` and the range (pydantic's validators
            turn it into :class:`InvalidInputError`).
    """
    try:
        utc = as_utc(moment)
    except (OverflowError, ValueError):  # a zone offset that leaves the calendar
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        raise ValueError(
            f"{name} must lie between {EARLIEST.date()} and {LATEST.date()} (UTC), "
            f"not {moment.isoformat()}"
        )
    return moment


def _check_moment(value: datetime, info: ValidationInfo) -> datetime:
    return check_moment(value, info.field_name or "a date")


def _iso_text(value: Any) -> Any:
    # pydantic would read a number (or a numeric string) as Unix time
    if isinstance(value, bool | int | float) or (
            isinstance(value, str) and not _ISO_START.match(value)):  # fmt: skip
        raise PydanticCustomError("datetime_type", "expected an ISO date or datetime")
    return value


_ISO_START = re.compile(r"\d{4}-\d{2}-\d{2}")
YEARS = r"^(000[2-9]|00[1-9]\d|0[1-9]\d\d|[1-8]\d{3}|9[0-8]\d\d|99[0-8]\d|999[0-8])-"
"""The years from :data:`EARLIEST` to :data:`LATEST`, as a JSON schema pattern."""

ISO_MOMENT: dict[str, Any] = {"type": "string", "pattern": YEARS,
                              "anyOf": [{"format": "date-time"}, {"format": "date"}]}  # fmt: skip
"""The JSON schema of a date a request takes: an ISO datetime, or a date (its midnight),
of a year from 0002 to 9998."""

Moment = Annotated[datetime, BeforeValidator(_iso_text), AfterValidator(_check_moment),
                   WithJsonSchema(ISO_MOMENT, "validation")]  # fmt: skip
"""A date a request may carry: an ISO datetime or date string (or a ``datetime``), in range,
or a clear error."""


# -- errors ----------------------------------------------------------------------------------


EXPECTED: Mapping[str, str] = {
    "string_type": "a string", "bytes_type": "a string", "int_type": "an integer",
    "int_parsing": "an integer", "int_from_float": "a whole number", "float_type": "a number",
    "float_parsing": "a number", "bool_type": "true or false", "bool_parsing": "true or false",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
    "datetime_type": DATE_WORDS, "datetime_parsing": DATE_WORDS,
    "datetime_from_date_parsing": DATE_WORDS, "date_type": DATE_WORDS,
    "date_parsing": DATE_WORDS, "date_from_datetime_parsing": DATE_WORDS,
}  # fmt: skip
"""What a field of each pydantic type error expects, in the words every door uses."""


def _plain(error: Mapping[str, Any]) -> str:
    """One of pydantic's errors in plain words (no pydantic wording reaches a caller)."""
    kind, ctx = str(error.get("type")), error.get("ctx") or {}
    if kind in EXPECTED:
        return f"expected {EXPECTED[kind]}"
    if kind in ("too_short", "string_too_short"):
        least = ctx.get("min_length", 1)
        if kind == "string_too_short":
            return "must not be empty" if least == 1 else f"needs at least {least} characters"
        return "needs at least one item" if least == 1 else f"needs at least {least} items"
    if kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"takes at most {ctx.get('max_length')} {unit}"
    bounds = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}  # fmt: skip
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx.get(key)}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "json_invalid":
        return "is not valid JSON"
    return "is not valid"


def describe_errors(errors: Iterable[Mapping[str, Any]], skip: Sequence[str] = ()) -> str:
    """One line for pydantic's error list: our own checks speak for themselves, pydantic's
    are put in plain words (:func:`_plain`) after the field's dotted path. ``skip`` drops
    leading location parts (such as FastAPI's ``body``)."""
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
            parts.append(f"{where or 'the input'}: {_plain(error)}")
    return "; ".join(dict.fromkeys(parts)) or "invalid input"


def refuse_unstorable(value: object, name: str) -> None:
    """Refuse text no store can hold in ``value`` (a string, or the strings, keys included,
    inside lists, tuples and mappings): a NUL character (U+0000), which PostgreSQL's text
    cannot hold, so that neither backend stores or searches it; and a lone surrogate
    (U+D800-U+DFFF), which is not Unicode text and has no UTF-8 form. Both backends answer
    the same error.

    Raises:
        InvalidInputError: naming the field.
    """
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(
                f"{name or 'input'} contains a NUL character (U+0000), which recalld neither "
                "stores nor searches; remove it"
            )
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(
                    f"{name or 'input'} is not valid Unicode text: {exc.reason} "
                    f"(U+{ord(value[exc.start]):04X} at character {exc.start + 1})"
                ) from None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            refuse_unstorable(key, name)
            refuse_unstorable(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            refuse_unstorable(item, name)


def parse(model: type[Model], data: Any) -> Model:
    """``model`` validated from ``data`` (a mapping, or an instance passed through).

    Raises:
        InvalidInputError: with :func:`describe_errors`' message, or :func:`refuse_unstorable`'s.
    """
    refuse_unstorable(data.model_dump() if isinstance(data, BaseModel) else data, "")
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
        value = [stored_type(t) for t in value]
        bad = [t for t in value if t not in MEMORY_TYPES]
        if bad:
            raise ValueError(f"unknown type(s) {', '.join(map(str, bad))}; use {TYPES_ACCEPTED}")
    return value


def _check_query(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # pydantic's type check names the field and the type
    if not value.strip():
        raise ValueError("the query is empty")
    if len(value) > MAX_QUERY_CHARS:
        raise ValueError(f"the query has {len(value):,} characters, over the limit of "
                         f"{MAX_QUERY_CHARS:,}: search with its key words")  # fmt: skip
    return value.strip()


def _check_mode(value: Any) -> Any:
    if value not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}")
    return value


def _whole(value: Any) -> Any:
    """A float without a fraction is the integer JSON Schema says it is (``5.0`` is ``5``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _check_limit(value: Any) -> Any:
    value = _whole(value)
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
    return value


def _check_preset(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or value not in PRESETS):
        raise ValueError(f"unknown preset {value!r}; choose one of {', '.join(PRESETS)}")
    return value


def _check_memory_type(value: Any) -> Any:
    value = stored_type(value)
    if value not in MEMORY_TYPES:
        raise ValueError(f"type must be one of {TYPES_ACCEPTED}")
    return value


def _check_range(name: str, low: float, high: float, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number")
    if not low <= value <= high:  # NaN fails too
        raise ValueError(f"{name} must be between {low} and {high}")
    return value


_FORBID = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Filters(BaseModel):
    """Restrictions applied before ranking (search, context) or listing; all optional."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        json_schema_extra={"examples": [{"project": "atlas", "tags": ["deploy"],
                                         "since": "2024-03-01"}]},
    )  # fmt: skip

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

    _types = field_validator("types", mode="before")(_check_types)

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


class _Ranked(BaseModel):
    """What search and context share."""

    model_config = _FORBID

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS,
                       json_schema_extra={"pattern": NOT_BLANK})  # fmt: skip
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

    _query = field_validator("query", mode="before")(_check_query)
    _mode = field_validator("mode", mode="before")(_check_mode)
    _preset = field_validator("preset", mode="before")(_check_preset)


class SearchQuery(_Ranked):
    """A search: ranked memories for a question (:meth:`MemoryEngine.run_search`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        json_schema_extra={"examples": [
            {"query": "when does my sister arrive?", "limit": 5},
            {"query": "deploy checklist", "limit": 3, "filters": {"project": "atlas"},
             "explain": True},
        ]},
    )  # fmt: skip

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

    _limit = field_validator("limit", mode="before")(_check_limit)

    @field_validator("near_misses", mode="before")
    @classmethod
    def _near_misses(cls, value: Any) -> Any:
        value = _whole(value)
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= 100:
            raise ValueError("near_misses must be between 0 and 100")
        return value


class ContextQuery(_Ranked):
    """A prompt-ready block of the best memories under a token budget
    (:meth:`MemoryEngine.run_context`)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        json_schema_extra={"examples": [{"query": "what do I know about the deploy?",
                                         "max_tokens": 500}]},
    )  # fmt: skip

    max_tokens: StrictInt | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """The budget in tokens (default: the retrieval config's, 2000; at most 100,000)."""
    limit: StrictInt | None = Field(default=None, ge=1, le=MAX_LIMIT)
    """How many hits to consider (default: enough to fill the budget)."""
    explain: StrictBool = False
    """Attach a trace to each hit of the block (as for a search)."""

    _limit = field_validator("limit", mode="before")(_check_limit)

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        value = _whole(value)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError("max_tokens must be positive")
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_CONTEXT_TOKENS:
            raise ValueError(f"max_tokens must be at most {MAX_CONTEXT_TOKENS:,}")
        return value


class ListQuery(BaseModel):
    """Memories passing filters, newest first (:meth:`MemoryEngine.run_list`)."""

    model_config = _FORBID

    limit: StrictInt = Field(default=50, ge=1)
    """How many memories (the HTTP API allows at most 1000 a page)."""
    offset: StrictInt = Field(default=0, ge=0)
    newest_first: StrictBool = True
    include_forgotten: StrictBool = False
    filters: Filters = Field(default_factory=Filters)

    _integers = field_validator("limit", "offset", mode="before")(_whole)


class MemoryFields(BaseModel):
    """The fields of a memory a caller may set (all but ``content`` optional)."""

    model_config = _FORBID

    type: MemoryType = "event"
    """``insight``, ``event``, ``raw``, ``turn`` or ``chunk``; ``fact``, ``preference`` ...
    are stored as their type (:data:`~recalld.records.TYPE_ALIASES`)."""
    event_time: Moment | None = None
    """When it happened (ISO); search dates the memory by it."""
    priority: float = Field(default=1.0, ge=1.0, le=2.0)
    """1.0-2.0: how much to favour it."""
    pinned: StrictBool = False
    evergreen: StrictBool = False
    """Never decays."""
    significance: float = Field(default=0.5, ge=0.0, le=1.0)
    """0.0-1.0."""
    project: IdText | None = None
    scope: IdText = "user"
    session_id: IdText | None = None
    tags: Tags = ()
    """At most 64, each up to 200 characters."""
    entities: Entities | None = None
    """``null`` lets recalld extract them from the content (at most 256 given)."""
    metadata: Metadata = Field(default_factory=dict)
    """Any JSON object, returned as given (up to 64 KB as JSON)."""
    embed_context: EmbedContext | None = None
    """Text embedded with the content but never shown or searched as words (up to 4,000
    characters)."""

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
        use_attribute_docstrings=True,
        json_schema_extra={"examples": [
            {"content": "My sister Ana arrives on 14 March.", "tags": ["family"]},
        ]},
    )  # fmt: skip

    content: str = Field(json_schema_extra={"pattern": NOT_BLANK})
    """The text to remember (up to the store's limit, 100,000 characters by default)."""
    id: IdText | None = None
    """Give an id to make re-adding idempotent; ``null`` generates one."""
    namespace: IdText | None = None
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
        use_attribute_docstrings=True,
        json_schema_extra={"examples": [{"memories": [
            {"content": "I moved to Berlin in March 2024.", "type": "event"},
            {"content": "Prefers tea over coffee.", "type": "insight"},
        ]}]},
    )  # fmt: skip

    memories: tuple[MemoryIn, ...] = Field(min_length=1)
    """The memories; their contents and ``embed_context`` together hold at most 1,000,000
    characters (what the model embeds for one request)."""
    dedupe: StrictBool = True
    """Content identical to a live memory in the same scope, project and session is not
    stored again (its result names the existing id)."""

    @model_validator(mode="after")
    def _embed_budget(self) -> AddMemories:
        total = embed_chars([(m.content, m.embed_context) for m in self.memories])
        check_embed_chars(total, f"the {len(self.memories)} memories")
        return self


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


def _patch_schema(schema: dict[str, Any]) -> None:
    """A patch names at least one field, and a field that always has a value takes no null."""
    schema["minProperties"] = 1
    schema["examples"] = [{"content": "Ana arrives on 15 March.", "tags": ["family", "travel"]}]
    for name in NOT_NULL:
        field = schema["properties"][name]
        kinds = [k for k in field.pop("anyOf", [field]) if k.get("type") != "null"]
        field.pop("default", None)
        field.update(kinds[0] if len(kinds) == 1 else {"anyOf": kinds})
    schema["properties"]["content"]["pattern"] = NOT_BLANK


class MemoryPatch(BaseModel):
    """Fields to change on a memory; those not given are kept. New content is re-embedded."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True,
                              json_schema_extra=_patch_schema)  # fmt: skip

    content: str | None = None
    type: MemoryType | None = None
    event_time: Moment | None = None
    priority: float | None = Field(default=None, ge=1.0, le=2.0)
    pinned: StrictBool | None = None
    evergreen: StrictBool | None = None
    significance: float | None = Field(default=None, ge=0.0, le=1.0)
    project: IdText | None = None
    scope: IdText | None = None
    session_id: IdText | None = None
    tags: Tags | None = None
    entities: Entities | None = None
    metadata: Metadata | None = None
    embed_context: EmbedContext | None = None

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

    id: str = Field(min_length=1, max_length=512)
    changes: MemoryPatch

    @model_validator(mode="after")
    def _something(self) -> UpdateMemory:
        if not self.changes.model_fields_set:
            raise ValueError(NOTHING_TO_CHANGE)
        return self


class SupersedeMark(BaseModel):
    """What makes a memory no longer current: give ``by``, ``until`` (or both), or ``clear``."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        json_schema_extra={
            "examples": [{"by": "m-2"}, {"until": "2026-05-01"}, {"clear": True}],
            "anyOf": [  # by, until (or both), or clear alone
                {"required": ["by"], "properties": {"by": {"type": "string"},
                                                    "clear": {"const": False}}},
                {"required": ["until"], "properties": {"until": ISO_MOMENT,
                                                       "clear": {"const": False}}},
                {"required": ["clear"], "properties": {"clear": {"const": True},
                                                       "by": {"type": "null"},
                                                       "until": {"type": "null"}}},
            ],
        },
    )  # fmt: skip

    by: str | None = Field(default=None, min_length=1, max_length=512)
    """The id of the memory that replaces it."""
    until: Moment | None = None
    """The time after which it counts as superseded (ISO date or datetime)."""
    clear: StrictBool = False
    """Make the memory current again (undo ``by`` and ``until``)."""

    @model_validator(mode="after")
    def _one_mark(self) -> SupersedeMark:
        if self.clear and (self.by is not None or self.until is not None):
            raise ValueError("clear cannot be combined with by or until")
        if not self.clear and self.by is None and self.until is None:
            raise ValueError("say what supersedes the memory: by (an id) or until (a time)")
        return self


class SupersedeMemory(SupersedeMark):
    """Mark one memory as no longer current (:meth:`MemoryEngine.run_supersede`)."""

    model_config = _FORBID

    id: str = Field(min_length=1, max_length=512)


class GetMemory(BaseModel):
    """One memory by id (:meth:`MemoryEngine.get`)."""

    model_config = _FORBID

    id: str = Field(min_length=1, max_length=512)


class ForgetMemories(BaseModel):
    """Hide memories from search, or delete them (:meth:`MemoryEngine.run_forget`)."""

    model_config = _FORBID

    ids: tuple[IdText, ...] = Field(min_length=1, max_length=MAX_IDS)
    hard: StrictBool = False
    """Delete for good instead of hiding."""

    @field_validator("ids", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class ImportRequest(BaseModel):
    """Import a file's memories or a transcript (:meth:`MemoryEngine.run_import`): one
    entry point for every format. Give ``path`` (a file the process can read, ``.gz``
    fine) or ``content`` (the file's bytes or text)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        json_schema_extra={"anyOf": [  # a path or the content, not both
            {"required": ["path"], "properties": {"path": {"type": "string"},
                                                  "content": {"type": "null"}}},
            {"required": ["content"], "properties": {"content": {"type": "string"},
                                                     "path": {"type": "null"}}},
        ]},
    )  # fmt: skip

    format: ImportFormat = "memories"
    path: str | None = None
    content: bytes | None = Field(default=None, json_schema_extra={"maxLength": MAX_EMBED_CHARS})
    """The file's text (at most 1,000,000 characters; larger files: import by ``path``)."""
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
        if self.content is not None:
            check_embed_chars(len(self.content), "the content to import")
        return self


Request = (SearchQuery | ContextQuery | ListQuery | AddMemories | UpdateMemory | GetMemory
           | ForgetMemories | ImportRequest | SupersedeMemory)  # fmt: skip
"""Every request :meth:`MemoryEngine.execute` takes."""
