"""Waiting for another process's lock on an SQLite file (stores and the embedding cache)."""

from __future__ import annotations

import sqlite3
import time

LOCK_WAIT_S = 30.0
"""How long opening or writing waits for another process's lock (the connection timeout)."""


def enable_wal(db: sqlite3.Connection) -> None:
    """Switch to WAL, waiting out another process that is creating the same store.

    Changing the journal mode answers "database is locked" at once instead of calling the
    busy handler, so two processes opening a new file together need this bounded retry.
    """
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
