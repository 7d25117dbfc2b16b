"""Checks of the memories callers give, in one place: the facade turns every
:class:`~recalld.records.NewMemory` into a :class:`~recalld.records.Memory` here
(:func:`prepare_memory`), whichever door it came through. Request objects
(:mod:`recalld.requests`) check JSON-shaped input before it becomes a ``NewMemory``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from recalld.entities import extract_entities
from recalld.errors import InvalidInputError
from recalld.records import MEMORY_TYPES, TYPES_ACCEPTED, Memory, NewMemory, stored_type
from recalld.request_limits import check_memory_sizes
from recalld.requests import as_utc, check_moment, refuse_unstorable
from recalld.text import content_hash, normalize_content, states_event

TEXT_FIELDS = (
    "content",
    "id",
    "scope",
    "project",
    "session_id",
    "tags",
    "entities",
    "metadata",
    "embed_context",
    "namespace",
)
"""The fields of a new memory that hold caller's text (checked by :func:`refuse_unstorable`)."""


def new_id() -> str:
    """Time-ordered id: 12 hex digits of milliseconds, then 8 random hex digits."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(4)}"


def prepare_memory(
    item: NewMemory,
    now: datetime,
    *,
    max_content_chars: int,
    namespace_for: Callable[[str | None], str],
) -> Memory:
    """``item`` checked and made a :class:`Memory` stored at ``now``.

    Args:
        item: what a caller gave.
        now: the creation (and update) time.
        max_content_chars: longer content is refused.
        namespace_for: the store tenancy's check of the requested namespace.

    Raises:
        InvalidInputError: a field is missing, mistyped or out of range, with a message
            naming it.
    """
    content = _checked_content(item.content, max_content_chars)
    check_field_types(item)
    for name in TEXT_FIELDS:
        refuse_unstorable(getattr(item, name), name)
    item = replace(item, type=stored_type(item.type))  # type: ignore[arg-type]
    check_memory_sizes(item)
    if item.type not in MEMORY_TYPES:
        raise InvalidInputError(f"type must be one of {TYPES_ACCEPTED}")
    if not 1.0 <= item.priority <= 2.0:
        raise InvalidInputError("priority must be between 1.0 and 2.0")
    if not 0.0 <= item.significance <= 1.0:
        raise InvalidInputError("significance must be between 0.0 and 1.0")
    if item.id is not None and not item.id.strip():
        raise InvalidInputError("an explicit id must not be blank")
    entities = item.entities if item.entities is not None else extract_entities(content)
    return Memory(
        id=item.id or new_id(),
        content=content,
        type=item.type,
        created_at=now,
        updated_at=now,
        content_hash=content_hash(content),
        event_time=as_utc(item.event_time),
        priority=item.priority,
        pinned=item.pinned,
        evergreen=item.evergreen,
        significance=item.significance,
        project=item.project,
        scope=item.scope,
        session_id=item.session_id,
        source=item.source,
        tags=tuple(dict.fromkeys(t.strip() for t in item.tags if t.strip())),
        entities=tuple(dict.fromkeys(e.lower() for e in entities)),
        metadata=dict(item.metadata),
        embed_context=_optional_text(item.embed_context, "embed_context"),
        namespace=namespace_for(item.namespace),
        tells_event=states_event(content),
    )


def _checked_content(content: object, max_content_chars: int) -> str:
    if not isinstance(content, str):
        raise InvalidInputError(f"content must be text, not {type(content).__name__}")
    text = normalize_content(content)
    if not text:
        raise InvalidInputError("content is empty or only whitespace")
    if len(text) > max_content_chars:
        raise InvalidInputError(
            f"content has {len(text)} characters, over the limit of "
            f"{max_content_chars}; split it, or index it as a file"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"content is not valid Unicode text: {exc.reason}") from exc
    return text


def _optional_text(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be text, not {type(value).__name__}")
    return value.strip() or None


def text_of(content: object) -> str:
    """Content as text: bytes are decoded as UTF-8; anything else but text is refused."""
    if isinstance(content, bytes):
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"content is not valid UTF-8: {exc}") from exc
    if not isinstance(content, str):
        raise InvalidInputError(f"content must be text, not {type(content).__name__}")
    return content


def _check_event_time(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, datetime):
        raise InvalidInputError("event_time must be a datetime")
    try:
        check_moment(value, "event_time")
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None


def check_field_types(item: NewMemory) -> None:
    """Clear errors for wrongly typed fields a Python caller may pass (the CLI parses its own)."""
    if item.tags is None:
        raise InvalidInputError("tags must be a list of strings")
    for name in ("pinned", "evergreen"):
        if not isinstance(getattr(item, name), bool):
            raise InvalidInputError(f"{name} must be true or false")
    for name in ("tags", "entities"):
        value = getattr(item, name)
        if value is not None and not (
            isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        ):
            raise InvalidInputError(f"{name} must be a list of strings")
    for name in ("id", "project", "session_id"):
        if getattr(item, name) is not None and not isinstance(getattr(item, name), str):
            raise InvalidInputError(f"{name} must be a string")
    if not isinstance(item.scope, str):
        raise InvalidInputError("scope must be a string")
    _check_event_time(item.event_time)
    for name in ("priority", "significance"):
        value = getattr(item, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInputError(f"{name} must be a number")
    if not isinstance(item.metadata, Mapping):
        raise InvalidInputError("metadata must be a JSON-serialisable mapping")
    try:
        json.dumps(dict(item.metadata))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata must be a JSON-serialisable mapping: {exc}") from exc
