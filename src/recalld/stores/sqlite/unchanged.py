"""State a store keeps per connection for as long as that connection sees no commit.

SQLite tells a connection whether the file changed since it last looked: ``PRAGMA
data_version`` moves when any *other* connection (of this process or another) commits, and
the connection's own ``total_changes`` counts its own writes. Together they stamp what a
connection has seen; state read through a connection is good while its stamp holds, and is
dropped, whole, at the first change.

The stamp is taken before the reads it covers. A commit landing between the stamp and a
read makes the read newer than the stamp, never older, and the next look sees the new stamp
and drops it. State is only ever filled outside a caller's transaction (the callers check
``in_transaction``): a transaction's own writes move ``total_changes`` before a rollback
undoes them, so rows read inside one could outlive the rollback under an unchanged stamp.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_State = TypeVar("_State")


def stamp(db: sqlite3.Connection) -> tuple[int, int]:
    """What ``db`` has seen: every other connection's commits and its own writes."""
    (version,) = db.execute("PRAGMA data_version").fetchone()
    return int(version), db.total_changes


class Unchanged(Generic[_State]):
    """One ``_State`` per connection, made anew by ``make`` whenever the connection saw a
    change since the last call (one per store; a connection's state is forgotten once the
    connection is closed and a new one is seen)."""

    def __init__(self, make: Callable[[sqlite3.Connection], _State]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._by_connection: dict[sqlite3.Connection, tuple[tuple[int, int], _State]] = {}

    def state(self, db: sqlite3.Connection) -> _State:
        """``db``'s state as of now (call before the reads it is filled from or used for)."""
        seen = stamp(db)
        with self._lock:
            kept = self._by_connection.get(db)
            if kept is None or kept[0] != seen:
                if kept is None:  # a new connection: forget those closed since
                    self._by_connection = {
                        c: k for c, k in self._by_connection.items() if is_open(c)
                    }
                kept = self._by_connection[db] = (seen, self._make(db))
        return kept[1]


def is_open(db: sqlite3.Connection) -> bool:
    """Whether ``db`` is still open: the store closes a thread's connection when the thread
    ends (a server's pool retires idle threads), and what was kept for it would otherwise
    stay until the store closes."""
    try:
        db.total_changes  # noqa: B018 (raises once the connection is closed)
    except sqlite3.ProgrammingError:
        return False
    return True
