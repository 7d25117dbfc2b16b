"""Stores: one typed protocol, backend-specific SQL only inside each backend's package."""

from __future__ import annotations

import os
from pathlib import Path

from recalld.config import is_dsn
from recalld.errors import StoreError
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

POSTGRES_EXTRA_HINT = "pip install 'recalld[postgres]'"


def open_store(location: str | os.PathLike[str], tenancy: Tenancy | None = None) -> Store:
    """Open the store at ``location`` for ``tenancy``: a PostgreSQL DSN
    (``postgresql://...``) or an SQLite file. The backend is chosen here and nowhere else.

    Raises:
        StoreError: the store cannot be opened, or the PostgreSQL extra is not installed.
    """
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
