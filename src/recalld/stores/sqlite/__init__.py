"""The embedded SQLite store (the default)."""

from recalld.stores.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
