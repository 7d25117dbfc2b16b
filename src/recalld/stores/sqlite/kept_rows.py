"""Memories read by id, kept between searches for as long as the store is unchanged.

A search reads the full row of every candidate it ranks (about 140 at 10k and 100k memories):
one statement, then each row decoded into a :class:`~recalld.records.Memory`, about 30 us a
row, a fifth of a 10k search's CPU. Consecutive searches share many of those rows, even
for different questions: of 200 distinct bench questions, a handle keeping the last 4,096
rows it read found 65% of the rows asked for at 10k and 34% at 100k
(docs/design/search-cpu-rows.md). A row found here is neither read nor decoded again.

What is kept is dropped, whole, at the first commit any of the handle's connections sees,
its own or another process's (:mod:`.unchanged`); nothing is kept or used inside a caller's
transaction. Rows are kept by (namespace, id) and looked up under the one namespace a
handle sees, so a tenant's read never meets another's row. Each memory handed out is a
copy with its own ``metadata`` dict, as a decoded row would be: a caller changing it
changes nothing kept.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from recalld.records import Memory
from recalld.stores.sqlite.unchanged import is_open, stamp

ROWS_KEPT = 4096
"""Memories kept per store handle (all its connections together), the least recently used
dropped first: about 2 kB each (content of a few hundred characters, the fields decoded),
so 8 MB or so. Over 200 distinct questions, 2,048 found 52% of the rows at 10k and 4,096
65%."""


class KeptRows:
    """The memories a store handle read by id, while none of its connections has seen a
    change.

    Each connection's stamp (:func:`.unchanged.stamp`) is compared with the one it had at its
    last look; any change, or a connection not seen before, drops every row kept and starts
    a new generation. Rows read are kept only if no drop happened since the look that
    preceded their read: a read whose snapshot predates a commit another connection has
    already noticed would otherwise be kept past it."""

    def __init__(self, capacity: int = ROWS_KEPT) -> None:
        self._capacity = capacity
        self._items: OrderedDict[tuple[str, str], Memory] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = 0
        self._seen: dict[sqlite3.Connection, tuple[int, int]] = {}

    def look(self, db: sqlite3.Connection) -> int | None:
        """The generation the rows kept now belong to, after dropping them if ``db`` saw a
        change (call before the read they may fill); None inside a caller's transaction."""
        if db.in_transaction:
            return None
        seen = stamp(db)
        with self._lock:
            last = self._seen.get(db)
            if last != seen:
                if last is None:  # a connection not seen before: forget those closed since
                    self._seen = {c: s for c, s in self._seen.items() if is_open(c)}
                self._seen[db] = seen
                self._items.clear()
                self._generation += 1
            return self._generation

    def take(self, generation: int, namespace: str, ids: Sequence[str]) -> dict[str, Memory]:
        """Copies of the kept memories among ``ids`` in ``namespace``, by id (none if the
        rows were dropped since the look that gave ``generation``)."""
        found: dict[str, Memory] = {}
        items = self._items
        with self._lock:
            if generation != self._generation:
                return found
            for memory_id in ids:
                memory = items.get((namespace, memory_id))
                if memory is not None:
                    items.move_to_end((namespace, memory_id))
                    found[memory_id] = _copy(memory)
        return found

    def keep(self, generation: int, namespace: str, memories: Iterable[Memory]) -> None:
        """Keep copies of ``memories``, just read from ``namespace`` after the look that gave
        ``generation`` (unless the rows were dropped since), dropping the least recently
        used."""
        items = self._items
        with self._lock:
            if generation != self._generation:
                return
            for memory in memories:
                items[(namespace, memory.id)] = _copy(memory)
            while len(items) > self._capacity:
                items.popitem(last=False)


def _copy(memory: Memory) -> Memory:
    """The same memory with a ``metadata`` dict of its own (every other field is
    immutable), made as :func:`~recalld.records.frozen_made` makes a record: a copy of the
    instance's ``__dict__`` becomes the copy's (a third of the cost of passing it as keyword
    arguments, once per row of a search)."""
    values = memory.__dict__.copy()
    values["metadata"] = values["metadata"].copy()
    item = _new(Memory)
    _set_attr(item, "__dict__", values)
    return item


_new = object.__new__
_set_attr = object.__setattr__
