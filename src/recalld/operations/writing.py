"""Writes: memories checked, embedded a span at a time and committed in batches.

A :class:`Writer` holds what a write needs (the store, the embedder, the clock); the engine
builds one per call, so a clock swapped on the engine takes effect at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from recalld.errors import ConflictError, InvalidInputError, NotFoundError
from recalld.providers.embedders import Embedder
from recalld.records import AddResult, Memory, NewMemory
from recalld.requests import SupersedeMemory, as_utc, refuse_unstorable
from recalld.stores.base import Store, already_stored
from recalld.validation import prepare_memory, text_of

Progress = Callable[[int], None]
EMBED_SPAN = 2048
"""Memories embedded together in bulk adds and reindex: the embedder sorts them by length
and cuts batches from the sorted list, so the longer the span, the less padding (spans of
256 ran about 15% slower than one span of 1,500 LoCoMo turns). Each span is then committed
in transactions of ``WRITE_BATCH``; 2,048 vectors hold 3 MB."""
WRITE_BATCH = 256
"""Memories committed per transaction in bulk adds."""
UPDATABLE = frozenset(NewMemory.__dataclass_fields__) - {"id"}
"""The fields ``update`` may change: those a new memory carries, except its id."""


@dataclass(frozen=True)
class Writer:
    """What a write needs from the engine."""

    store: Store
    embedder: Callable[[], Embedder]
    """The engine's embedder, loaded (and its fingerprint checked) on first call."""
    cached: Callable[[Embedder], Embedder]
    """The embedder behind the on-disk cache when one is configured."""
    clock: Callable[[], datetime]
    max_content_chars: int

    def prepare(self, item: NewMemory, now: datetime) -> Memory:
        """``item`` checked and made a :class:`Memory` (see :func:`prepare_memory`)."""
        return prepare_memory(
            item,
            now,
            max_content_chars=self.max_content_chars,
            namespace_for=self.store.tenancy.namespace_for,
        )

    def check_new(self, item: NewMemory) -> None:
        """Raise InvalidInputError if ``item`` could not be stored."""
        self.prepare(item, self.clock())

    def get(self, memory_id: str) -> Memory:
        refuse_unstorable(memory_id, "id")
        found = self.store.get_many([memory_id])
        if not found:
            raise NotFoundError(f"unknown id: no memory with id {memory_id}")
        return found[0]


def add_many(
    writer: Writer, items: Iterable[NewMemory | str], dedupe: bool, progress: Progress | None
) -> list[AddResult]:
    """See :meth:`MemoryEngine.add_many`: everything is checked before anything is written."""
    now = writer.clock()
    given = [NewMemory(i) if isinstance(i, str) else i for i in items]
    memories = []
    for number, item in enumerate(given, start=1):
        try:
            memories.append(writer.prepare(item, now))
        except InvalidInputError as exc:
            if len(given) == 1:
                raise
            raise InvalidInputError(f"item {number} of {len(given)}: {exc}") from exc
    results: list[AddResult] = []
    for start in range(0, len(memories), EMBED_SPAN):
        results.extend(_add_span(writer, memories[start : start + EMBED_SPAN], dedupe, progress))
    return results


def _add_span(
    writer: Writer, span: list[Memory], dedupe: bool, progress: Progress | None
) -> list[AddResult]:
    """Classify ``span`` (same id, duplicate or fresh), embed the fresh memories in one
    call, then commit them ``WRITE_BATCH`` at a time. ``progress`` advances as memories
    are found already stored and as the model finishes each batch."""
    store = writer.store
    known = already_stored(span, store.get_many, store.find_duplicates, dedupe)
    fresh = [m for m, match in zip(span, known, strict=True) if match is None]
    if progress is not None and len(fresh) < len(span):
        progress(len(span) - len(fresh))
    late: dict[str, str] = {}
    windows: dict[str, int] = {}
    if fresh:
        embedder = writer.embedder()
        texts = [m.embedding_text for m in fresh]
        embedded = writer.cached(embedder).embed_documents(texts, progress)
        fp = embedder.fingerprint.to_json()
        stamped = [replace(m, embedding_fingerprint=fp) for m in fresh]
        # Checked again inside each write's lock: another handle or process may have
        # stored the same memory while this one was embedding.
        for start in range(0, len(stamped), WRITE_BATCH):
            batch = slice(start, start + WRITE_BATCH)
            late |= store.insert_unique(stamped[batch], embedded.vectors[batch], by_content=dedupe)
        windows = dict(zip((m.id for m in fresh), embedded.windows, strict=True))
    return [_result(m, match, late, windows) for m, match in zip(span, known, strict=True)]


def _result(
    memory: Memory, match: str | None, late: dict[str, str], windows: dict[str, int]
) -> AddResult:
    """The result for ``memory``: already stored (``match``), stored meanwhile by another
    writer (``late``), or created here."""
    if match is not None:
        return AddResult(memory.id, False, match)
    if memory.id in late:
        return AddResult(memory.id, False, late[memory.id])
    return AddResult(memory.id, True, embedding_windows=windows[memory.id])


def update(writer: Writer, memory_id: str, changes: dict[str, Any]) -> Memory:
    """See :meth:`MemoryEngine.update`."""
    old = writer.get(memory_id)
    unknown = sorted(set(changes) - UPDATABLE)
    if unknown:
        raise InvalidInputError(f"cannot update {', '.join(unknown)}")
    if "content" in changes:
        changes["content"] = text_of(changes["content"])
    merged = NewMemory(**{**{f: getattr(old, f) for f in UPDATABLE}, "id": old.id, **changes})
    if "content" in changes and "entities" not in changes:
        merged = replace(merged, entities=None)
    fresh = _kept(old, writer.prepare(merged, writer.clock()))
    unchanged = replace(
        fresh, updated_at=old.updated_at, embedding_fingerprint=old.embedding_fingerprint
    )
    if unchanged == old:
        return old
    vector = None
    if fresh.embedding_text != old.embedding_text:
        embedder = writer.embedder()
        vector = writer.cached(embedder).embed_documents([fresh.embedding_text]).vectors[0]
        fresh = replace(fresh, embedding_fingerprint=writer.embedder().fingerprint.to_json())
    else:
        fresh = replace(fresh, embedding_fingerprint=old.embedding_fingerprint)
    writer.store.replace(fresh, vector)
    return writer.get(memory_id)


def _kept(old: Memory, fresh: Memory) -> Memory:
    """``fresh`` with the fields NewMemory does not carry taken from ``old``: an update
    must not un-forget a memory."""
    return replace(
        fresh,
        created_at=old.created_at,
        access_count=old.access_count,
        last_accessed_at=old.last_accessed_at,
        forgotten_at=old.forgotten_at,
        valid_until=old.valid_until,
        superseded_by=old.superseded_by,
        position=old.position if fresh.session_id == old.session_id else None,
    )


def supersede(writer: Writer, request: SupersedeMemory) -> Memory:
    """See :meth:`MemoryEngine.supersede`."""
    old = writer.get(request.id)
    if request.by == request.id:
        raise ConflictError("a memory cannot supersede itself")
    if request.by is not None:
        writer.get(request.by)
    fresh = replace(
        old,
        superseded_by=None if request.clear else (request.by or old.superseded_by),
        valid_until=None if request.clear else (as_utc(request.until) or old.valid_until),
        updated_at=writer.clock(),
    )
    writer.store.replace(fresh, None)
    return writer.get(request.id)


def forget(writer: Writer, ids: str | Sequence[str], hard: bool) -> int:
    """See :meth:`MemoryEngine.forget`: every id must be known, or nothing changes."""
    wanted = [ids] if isinstance(ids, str) else list(ids)
    refuse_unstorable(wanted, "id")
    found = {m.id for m in writer.store.get_many(wanted)}
    missing = [i for i in wanted if i not in found]
    if missing:
        raise NotFoundError(f"unknown id: no memory with id {', '.join(missing)}")
    return writer.store.forget(wanted, hard=hard, at=writer.clock())
