"""Memories read by id, kept between searches for as long as the store is unchanged.

A search reads the full row of every candidate it ranks (about 140 at 10k and 100k memories):
one statement, then each row decoded into a :class:`~recalld.records.Memory`, about 30 us a
row, a fifth of a 10k search's CPU. Consecutive searches share many of those rows, even
for different questions: of 200 distinct bench questions, a connection keeping the last
4,096 rows it read found 65% of the rows asked for at 10k and 34% at 100k
(docs/design/search-cpu.md). A row found here is neither read nor decoded again.

What is kept is dropped, whole, at the first commit the connection sees, its own or another
process's (:mod:`.unchanged`); nothing is kept or used inside a caller's transaction. Rows
are kept by (namespace, id) and looked up under the one namespace a handle sees, so a
tenant's read never meets another's row. Each memory handed out is a copy with its own
``metadata`` dict, as a decoded row would be: a caller changing it changes nothing kept.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from recalld.records import Memory
from recalld.stores.sqlite.unchanged import Unchanged

ROWS_KEPT = 4096
"""Memories kept per connection, the least recently used dropped first: about 2 kB each
(content of a few hundred characters, the fields decoded), so 8 MB or so per connection.
Over 200 distinct questions, 2,048 found 52% of the rows at 10k and 4,096 65%."""


class KeptRows:
    """The memories each connection of a store read by id, while it sees no change."""

    def __init__(self, capacity: int = ROWS_KEPT) -> None:
        self._kept = Unchanged(lambda _db: _Rows(capacity))

    def rows(self, db: sqlite3.Connection) -> _Rows | None:
        """``db``'s kept rows as of now (call before the read they fill); None inside a
        caller's transaction."""
        return None if db.in_transaction else self._kept.state(db)


class _Rows:
    __slots__ = ("_capacity", "_items", "_lock")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[tuple[str, str], Memory] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, namespace: str, ids: Sequence[str]) -> dict[str, Memory]:
        """Copies of the kept memories among ``ids`` in ``namespace``, by id."""
        found: dict[str, Memory] = {}
        items = self._items
        with self._lock:
            for memory_id in ids:
                memory = items.get((namespace, memory_id))
                if memory is not None:
                    items.move_to_end((namespace, memory_id))
                    found[memory_id] = _copy(memory)
        return found

    def keep(self, namespace: str, memories: Iterable[Memory]) -> None:
        """Keep copies of ``memories`` (just read from ``namespace``), dropping the least
        recently used."""
        items = self._items
        with self._lock:
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
