"""A memory as a row of the ``memories`` table and back: one codec for both backends.

Both backends keep the same columns in the same order (:data:`COLUMNS`), times as UTC epoch
seconds (so both compute the same decays), flags as booleans (SQLite stores them as 0 and
1). They differ only in how a list and a mapping travel: SQLite keeps JSON text, PostgreSQL
``text[]`` and ``jsonb``. A backend names those four conversions in a :class:`Values`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from recalld.records import Memory, Source, frozen_made

if TYPE_CHECKING:
    from recalld.stores.base import SourceFile

COLUMNS = (
    "id, content, type, content_hash, event_time, created_at, updated_at, last_accessed_at,"
    " ref_time, access_count, priority, pinned, evergreen, significance, project, scope,"
    " session_id, source_kind, source_path, source_start, source_end, source_ref, tags,"
    " entities, metadata, valid_until, superseded_by, embedding_fingerprint, forgotten_at,"
    " embed_context, tells_event, namespace, position"
)
"""The ``memories`` columns a memory is written to and read from, in row order."""
COLUMN_NAMES = [c.strip() for c in COLUMNS.split(",")]


@dataclass(frozen=True)
class Values:
    """How a backend stores a list of strings and a mapping, each way."""

    list_out: Callable[[Sequence[str]], Any]
    list_in: Callable[[Any], tuple[Any, ...]]
    mapping_out: Callable[[Mapping[str, Any]], Any]
    mapping_in: Callable[[Any], dict[str, Any]]
    """A fresh dict for each row: callers may change it."""


def ts(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def dt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


MOMENTS_KEPT = 4096
"""Decoded times kept (about 0.5 MB). A row's times repeat: its creation and last update
are one moment until it changes, and one import stores its memories at one moment, so a
search's hundred or more rows hold far fewer distinct times than fields."""


@functools.lru_cache(maxsize=MOMENTS_KEPT)
def moment(value: float) -> datetime:
    """The UTC time of an epoch ``value``; the same (immutable) object for the same value,
    a cache hit costing a third of ``fromtimestamp``."""
    return datetime.fromtimestamp(value, UTC)


def encode(memory: Memory, namespace: str, position: int | None, values: Values) -> tuple[Any, ...]:
    """The row of :data:`COLUMNS` for ``memory`` in ``namespace`` at ``position``."""
    s = memory.source
    return (
        memory.id,
        memory.content,
        memory.type,
        memory.content_hash,
        ts(memory.event_time),
        ts(memory.created_at),
        ts(memory.updated_at),
        ts(memory.last_accessed_at),
        ts(memory.reference_time),
        memory.access_count,
        memory.priority,
        memory.pinned,
        memory.evergreen,
        memory.significance,
        memory.project,
        memory.scope,
        memory.session_id,
        s.kind,
        s.path,
        s.line_start,
        s.line_end,
        s.ref,
        values.list_out(memory.tags),
        values.list_out(memory.entities),
        values.mapping_out(memory.metadata),
        ts(memory.valid_until),
        memory.superseded_by,
        memory.embedding_fingerprint,
        ts(memory.forgotten_at),
        memory.embed_context,
        memory.tells_event,
        namespace,
        position,
    )


def decode(row: Sequence[Any], values: Values) -> Memory:
    """The memory of a row of :data:`COLUMNS` (unpacked by position: a search decodes a
    hundred or more, and lookups by column name were most of the cost)."""
    (
        id_,
        content,
        type_,
        content_hash,
        event_time,
        created_at,
        updated_at,
        last_accessed,
        _ref_time,
        access_count,
        priority,
        pinned,
        evergreen,
        significance,
        project,
        scope,
        session_id,
        source_kind,
        source_path,
        source_start,
        source_end,
        source_ref,
        tags,
        entities,
        metadata,
        valid_until,
        superseded_by,
        fingerprint,
        forgotten_at,
        embed_context,
        tells_event,
        namespace,
        position,
    ) = row
    # Built by frozen_made: the dataclass ``__init__`` was half the cost of decoding a row
    # (tests/contract/test_store.py checks the fields given against ``dataclasses.fields``).
    # Times are checked for None here rather than in ``dt``: six a row.
    source = frozen_made(
        Source,
        kind=source_kind,
        path=source_path,
        line_start=source_start,
        line_end=source_end,
        ref=source_ref,
    )
    memory = frozen_made(
        Memory,
        id=id_,
        content=content,
        type=type_,
        content_hash=content_hash,
        event_time=None if event_time is None else moment(event_time),
        created_at=datetime.now(UTC) if created_at is None else moment(created_at),
        updated_at=datetime.now(UTC) if updated_at is None else moment(updated_at),
        last_accessed_at=None if last_accessed is None else moment(last_accessed),
        access_count=access_count,
        priority=priority,
        pinned=bool(pinned),
        evergreen=bool(evergreen),
        significance=significance,
        project=project,
        scope=scope,
        session_id=session_id,
        source=source,
        tags=values.list_in(tags),
        entities=values.list_in(entities),
        metadata=values.mapping_in(metadata),
        valid_until=None if valid_until is None else moment(valid_until),
        superseded_by=superseded_by,
        embedding_fingerprint=fingerprint,
        forgotten_at=None if forgotten_at is None else moment(forgotten_at),
        embed_context=embed_context,
        tells_event=None if tells_event is None else bool(tells_event),
        namespace=namespace,
        position=position,
    )
    return memory


def source_file_row(namespace: str, f: SourceFile) -> tuple[Any, ...]:
    """An indexed file's record as a row of ``source_files``, in the column order both
    backends' upserts name."""
    return (
        namespace,
        f.path,
        f.root,
        f.size,
        f.mtime_ns,
        f.status,
        f.content_hash,
        f.chunker,
        f.error,
        ts(f.indexed_at),
    )
