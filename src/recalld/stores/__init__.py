"""Stores: one typed protocol, backend-specific SQL only inside each backend's package."""

from __future__ import annotations

import os
from pathlib import Path

from recalld.errors import StoreError, install_hint
from recalld.locations import is_dsn, missing_store, store_exists
from recalld.stores.base import (
    CandidateRequest,
    ChannelCandidate,
    SourceIndex,
    Store,
    StoreStats,
    Tenancy,
)

__all__ = [
    "CandidateRequest",
    "ChannelCandidate",
    "SourceIndex",
    "Store",
    "StoreStats",
    "Tenancy",
    "open_store",
]

POSTGRES_EXTRA_HINT = install_hint("postgres")


def open_store(
    location: str | os.PathLike[str], tenancy: Tenancy | None = None, *, create: bool = True
) -> Store:
    """Open the store at ``location`` for ``tenancy``: a PostgreSQL DSN
    (``postgresql://...``) or an SQLite file. The backend is chosen here and nowhere else.

    Args:
        location: the DSN or the file.
        tenancy: whose memories the store reaches.
        create: make an SQLite file that does not exist yet; False refuses it instead, so a
            mistyped path is an error rather than a new, empty memory.

    Raises:
        StoreError: the store cannot be opened, is missing (``create=False``), or the
            PostgreSQL extra is not installed.
    """
    if not create and not store_exists(location):
        raise missing_store(location)
    if is_dsn(location):
        try:
            from recalld.stores.postgres import PostgresStore
        except ImportError as exc:
            raise StoreError(
                f"a PostgreSQL store needs the postgres extra ({exc.name} is missing): "
                f"{POSTGRES_EXTRA_HINT}"
            ) from exc
        return PostgresStore(str(location), tenancy)
    from recalld.stores.sqlite import SQLiteStore

    return SQLiteStore(Path(location), tenancy)
