"""Memories read by earlier searches, kept while the store is unchanged.

A search reads about 140 rows (the fused candidates and their session neighbours), each 33
columns made into Python objects and decoded: about 20 us a row, the largest part of a
search's CPU outside the two channels. Searches of one store read many of the same rows
again (over 150 different questions of the scale benchmark, 68% of the rows a search read
at 10k memories had been read by an earlier one, 36% at 100k), and a row only changes by a
write. So a handle keeps the memories it read, up to :data:`ROWS_KEPT` in the process, and
serves them again while no write has been committed since.

A write is seen from the connection that reads: SQLite's ``PRAGMA data_version`` changes
when another connection (another thread's, another handle's, another process's) has
committed, and the connection's own ``total_changes`` when it wrote itself. Every read by
id asks first; a change, or a connection asking for the first time, starts a new
generation, and memories kept under an older one are never served. Memories are kept
under the generation that was current before their rows were read, so a row read before
a write and kept after it is never served either. What is served is a copy with its own
metadata dict, as a row read from the file gives (callers may change it).
"""

from __future__ import annotations

import copy
import itertools
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from recalld.records import Memory

ROWS_KEPT = 4096
"""Memories kept in the process, over all its handles, the least recently used dropped
first: about 10 MB (2.5 KB a memory of the scale benchmark). Over 150 different questions
this many serve 62% of the rows at 10k memories and 30% at 100k (all of them kept: 68% and
36%)."""

_kept: OrderedDict[tuple[int, str], tuple[int, Memory]] = OrderedDict()
"""(handle, memory id) -> (the handle's generation when its row was read, the memory)."""
_kept_lock = threading.Lock()
_handles = itertools.count()


class RowCache:
    """The memories one store handle (one tenancy) has read, and their generation."""

    def __init__(self) -> None:
        self._handle = next(_handles)
        self._generation = 0
        self._seen: dict[int, tuple[int, int]] = {}
        """Per connection (its ``id``: the handle holds each until it closes), what it saw
        when it last asked: ``data_version`` and ``total_changes``."""
        self._lock = threading.Lock()

    def generation(self, db: sqlite3.Connection) -> int:
        """The generation of memories that may be served on ``db`` now: a new one when
        ``db`` sees a write committed since it last asked, or asks for the first time."""
        (version,) = db.execute("PRAGMA data_version").fetchone()
        seen = (version, db.total_changes)
        with self._lock:
            if self._seen.get(id(db)) != seen:
                self._seen[id(db)] = seen
                self._generation += 1
            return self._generation

    def get(self, generation: int, ids: Iterable[str]) -> dict[str, Memory]:
        """The memories of ``ids`` kept under ``generation``, as copies."""
        found: dict[str, Memory] = {}
        with _kept_lock:
            for memory_id in ids:
                key = (self._handle, memory_id)
                entry = _kept.get(key)
                if entry is not None and entry[0] == generation:
                    _kept.move_to_end(key)
                    found[memory_id] = entry[1]
        return {memory_id: _copy(memory) for memory_id, memory in found.items()}

    def put(self, generation: int, memories: Sequence[Memory]) -> None:
        """Keep copies of ``memories``, read under ``generation`` (nothing when a later
        generation has begun since: they may predate a write)."""
        if self._generation != generation:
            return
        copies = [(memory.id, _copy(memory)) for memory in memories]
        with _kept_lock:
            for memory_id, memory in copies:
                key = (self._handle, memory_id)
                _kept[key] = (generation, memory)
                _kept.move_to_end(key)
            while len(_kept) > ROWS_KEPT:
                _kept.popitem(last=False)

    def drop(self) -> None:
        """Forget every memory of this handle (it closes)."""
        with _kept_lock:
            for key in [k for k in _kept if k[0] == self._handle]:
                del _kept[key]


def forget_all() -> None:
    """Forget every memory kept in the process: a benchmark that times searches of questions
    an earlier pass searched starts each pass with none kept (``recalld bench scale``)."""
    with _kept_lock:
        _kept.clear()


def _copy(memory: Memory) -> Memory:
    """The same memory with metadata of its own, nested values too (made as the row
    decoder makes one: without the frozen dataclass's ``__init__``)."""
    metadata = memory.metadata
    nested = any(isinstance(value, dict | list) for value in metadata.values())
    made = object.__new__(Memory)
    made.__dict__.update(memory.__dict__)
    made.__dict__["metadata"] = copy.deepcopy(metadata) if nested else dict(metadata)
    return made
