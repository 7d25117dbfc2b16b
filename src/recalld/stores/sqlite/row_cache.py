"""Rows read by earlier searches, kept while the store is unchanged.

A search reads about 140 rows (the fused candidates and their session neighbours), about 20
us a row: 12 for SQLite to find it and make its 33 columns into Python objects, 7 to decode
them into a memory. Searches of one store read many of the same rows again (over 150
different questions of the scale benchmark, 68% of the rows a search read at 10k memories
had been read by an earlier one, 36% at 100k), and a row only changes by a write. So a
handle keeps the rows it read, up to :data:`ROWS_KEPT` in the process, and serves them again
while no write has been committed since. It keeps the row's values, not the memory: a
memory is decoded from them anew each time, as from the file (its metadata a dict of its
own that callers may change); keeping one costs about a microsecond, so a row read once
and never again costs next to nothing, and one read again saves SQLite's part.

Measured over 150 searches' reads (the second half timed, the first half read before): at
10k memories, 65% of the rows served, 2.6 against 3.8 ms of a search's CPU; at 100k, 23%,
which saves no more than keeping and looking up costs (3.55 against 3.52 ms).

A write is seen from the connection that reads: SQLite's ``PRAGMA data_version`` changes
when another connection (another thread's, another handle's, another process's) has
committed, and the connection's own ``total_changes`` when it wrote itself. Every read by
id asks first; a change, or a connection asking for the first time, starts a new
generation, and rows kept under an older one are never served. Rows are kept under the
generation that was current before they were read, so a row read before a write and kept
after it is never served either.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

ROWS_KEPT = 8192
"""Rows kept in the process, over all its handles, the least recently used dropped first:
about 16 MB (2 KB a row of the scale benchmark, its Python objects included). Over 150
different questions this many would serve 68% of the rows a search reads at 10k memories
and 34% at 100k (4,096: 62% and 30%)."""

Row = tuple[Any, ...]
"""A row of :data:`recalld.stores.sqlite.row_values.COLUMNS`."""

_kept: OrderedDict[tuple[int, str], tuple[int, Row]] = OrderedDict()
"""(handle, memory id) -> (the handle's generation when the row was read, the row)."""
_kept_lock = threading.Lock()
_handles = itertools.count()


class RowCache:
    """The rows one store handle (one tenancy) has read, and their generation."""

    def __init__(self) -> None:
        self._handle = next(_handles)
        self._generation = 0
        self._seen: dict[int, tuple[int, int]] = {}
        """Per connection (its ``id``: the handle holds each until it closes), what it saw
        when it last asked: ``data_version`` and ``total_changes``."""
        self._lock = threading.Lock()

    def generation(self, db: sqlite3.Connection) -> int:
        """The generation of rows that may be served on ``db`` now: a new one when
        ``db`` sees a write committed since it last asked, or asks for the first time."""
        (version,) = db.execute("PRAGMA data_version").fetchone()
        seen = (version, db.total_changes)
        with self._lock:
            if self._seen.get(id(db)) != seen:
                self._seen[id(db)] = seen
                self._generation += 1
            return self._generation

    def get(self, generation: int, ids: Iterable[str]) -> dict[str, Row]:
        """The rows of ``ids`` kept under ``generation``."""
        found: dict[str, Row] = {}
        with _kept_lock:
            for memory_id in ids:
                key = (self._handle, memory_id)
                entry = _kept.get(key)
                if entry is not None and entry[0] == generation:
                    _kept.move_to_end(key)
                    found[memory_id] = entry[1]
        return found

    def put(self, generation: int, rows: Sequence[tuple[str, Row]]) -> None:
        """Keep ``rows`` (memory id, row), read under ``generation`` (nothing when a later
        generation has begun since: they may predate a write)."""
        if self._generation != generation:
            return
        with _kept_lock:
            for memory_id, row in rows:
                key = (self._handle, memory_id)
                _kept[key] = (generation, row)
                _kept.move_to_end(key)
            while len(_kept) > ROWS_KEPT:
                _kept.popitem(last=False)

    def drop(self) -> None:
        """Forget every row of this handle (it closes)."""
        with _kept_lock:
            for key in [k for k in _kept if k[0] == self._handle]:
                del _kept[key]


def forget_all() -> None:
    """Forget every row kept in the process: a benchmark that times searches of questions
    an earlier pass searched starts each pass with none kept (``recalld bench scale``)."""
    with _kept_lock:
        _kept.clear()
