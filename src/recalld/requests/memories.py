"""Requests that write: add, update, supersede, get and forget memories."""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from recalld.records import (
    MemoryType,
    NewMemory,
    Source,
)
from recalld.request_limits import (
    MAX_IDS,
    EmbedContext,
    Entities,
    IdText,
    Metadata,
    Tags,
    check_embed_chars,
    embed_chars,
)
from recalld.requests.base import (
    ISO_MOMENT,
    NOT_BLANK,
    NOTHING_TO_CHANGE,
    Moment,
    RequestModel,
    check_memory_type,
    check_range,
)


class MemoryFields(RequestModel):
    """The fields of a memory a caller may set (all but ``content`` optional)."""

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

    _type = field_validator("type", mode="before")(check_memory_type)

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: Any) -> Any:
        return check_range("priority", 1.0, 2.0, value)

    @field_validator("significance", mode="before")
    @classmethod
    def _significance(cls, value: Any) -> Any:
        return check_range("significance", 0.0, 1.0, value)

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
        json_schema_extra={
            "examples": [
                {"content": "My sister Ana arrives on 14 March.", "tags": ["family"]},
            ]
        },
    )

    content: str = Field(json_schema_extra={"pattern": NOT_BLANK})
    """The text to remember (up to the store's limit, 100,000 characters by default)."""
    id: IdText | None = None
    """Give an id to make re-adding idempotent; ``null`` generates one."""
    namespace: IdText | None = None
    """A shared namespace granted to the caller's tenant; ``null``: the tenant's own."""

    def to_new(self) -> NewMemory:
        return NewMemory(
            content=self.content,
            type=self.type,
            event_time=self.event_time,
            priority=self.priority,
            pinned=self.pinned,
            evergreen=self.evergreen,
            significance=self.significance,
            project=self.project,
            scope=self.scope,
            session_id=self.session_id,
            source=Source(),
            tags=self.tags,
            entities=self.entities,
            metadata=dict(self.metadata),
            id=self.id,
            embed_context=self.embed_context,
            namespace=self.namespace,
        )


class AddMemories(RequestModel):
    """Memories to store together; nothing is stored if one is refused
    (:meth:`MemoryEngine.run_add`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "memories": [
                        {"content": "I moved to Berlin in March 2024.", "type": "event"},
                        {"content": "Prefers tea over coffee.", "type": "insight"},
                    ]
                }
            ]
        },
    )

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


class MemoryPatch(RequestModel):
    """Fields to change on a memory; those not given are kept. New content is re-embedded."""

    model_config = ConfigDict(json_schema_extra=_patch_schema)

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
            return check_memory_type(value)
        if info.field_name in ("tags", "entities"):
            return MemoryFields._strings(value)
        low, high = (1.0, 2.0) if info.field_name == "priority" else (0.0, 1.0)
        return check_range(str(info.field_name), low, high, value)

    @model_validator(mode="after")
    def _no_null_for_required(self) -> MemoryPatch:
        for name in sorted(self.model_fields_set & NOT_NULL):
            if getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null (leave it out to keep it)")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields the caller gave (``null`` clears an optional field)."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class UpdateMemory(RequestModel):
    """Change one memory (:meth:`MemoryEngine.run_update`)."""

    id: str = Field(min_length=1, max_length=512)
    changes: MemoryPatch

    @model_validator(mode="after")
    def _something(self) -> UpdateMemory:
        if not self.changes.model_fields_set:
            raise ValueError(NOTHING_TO_CHANGE)
        return self


class SupersedeMark(RequestModel):
    """What makes a memory no longer current: give ``by``, ``until`` (or both), or ``clear``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"by": "m-2"}, {"until": "2026-05-01"}, {"clear": True}],
            "anyOf": [  # by, until (or both), or clear alone
                {
                    "required": ["by"],
                    "properties": {"by": {"type": "string"}, "clear": {"const": False}},
                },
                {
                    "required": ["until"],
                    "properties": {"until": ISO_MOMENT, "clear": {"const": False}},
                },
                {
                    "required": ["clear"],
                    "properties": {
                        "clear": {"const": True},
                        "by": {"type": "null"},
                        "until": {"type": "null"},
                    },
                },
            ],
        },
    )

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

    id: str = Field(min_length=1, max_length=512)


class GetMemory(RequestModel):
    """One memory by id (:meth:`MemoryEngine.get`)."""

    id: str = Field(min_length=1, max_length=512)


class ForgetMemories(RequestModel):
    """Hide memories from search, or delete them (:meth:`MemoryEngine.run_forget`)."""

    ids: tuple[IdText, ...] = Field(min_length=1, max_length=MAX_IDS)
    hard: StrictBool = False
    """Delete for good instead of hiding."""

    @field_validator("ids", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value
