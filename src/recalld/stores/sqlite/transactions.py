"""How the SQLite store's calls meet SQLite: each public call inside :func:`guarded` (its
failures as one clear :class:`StoreError`, and calls on an in-memory store's one connection
taken in turn), each write inside one :class:`Transaction`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from recalld.errors import StoreError
from recalld.stores.base import guard_public_methods


@contextmanager
def _sqlite_call(store: Any) -> Iterator[None]:
    """One public call: SQLite failures reach callers as :class:`StoreError` (a file damaged
    after it was opened, or a lock held past the timeout, gives one clear error: exit code
    4 in the CLI), and calls on the store's connection are serialised."""
    with sqlite_errors(store.path), store._serial:
        yield


guarded = guard_public_methods(_sqlite_call)
"""The store class's decorator: every public method runs inside :func:`_sqlite_call`."""


@contextmanager
def sqlite_errors(path: str) -> Iterator[None]:
    """SQLite's failures on the store at ``path`` as a :class:`StoreError` with a hint."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        text = str(exc)
        if "malformed" in text or "not a database" in text:
            hint = "the file is damaged: restore a backup, or move it aside and start a new store"
        elif "locked" in text or "busy" in text:
            hint = "another process holds the store's write lock; try again"
        else:
            hint = "check the file, its folder and the free disk space"
        raise StoreError(f"the store {path} failed ({text}); {hint}") from exc


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: writers queue on the lock instead of failing."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"the store is locked or read-only: {exc}") from exc

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if kind is None:
            self._db.execute("COMMIT")
        elif self._db.in_transaction:  # SQLite may already have rolled back (e.g. on corruption)
            self._db.execute("ROLLBACK")
