"""How the PostgreSQL store reports a database failure: every public method of its classes
raises :class:`~recalld.errors.StoreError` (or a more precise error of the facade's) naming
the store, never a driver exception."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg

from recalld.errors import EmbedderMismatchError, InvalidInputError, StoreError
from recalld.stores.base import guard_public_methods


def pg_call(store: Any) -> AbstractContextManager[None]:
    """Public methods report database failures as :class:`StoreError`."""
    return pg_errors(store.path)


raising_store_errors = guard_public_methods(pg_call)
"""The class decorator of the store and of each part of it defined apart."""


@contextmanager
def pg_errors(where: str) -> Iterator[None]:
    try:
        yield
    except psycopg.errors.DataException as exc:
        if "0x00" in str(exc):  # a NUL the facade's checks did not see: the same answer
            raise InvalidInputError(
                "text with a NUL character (U+0000) is neither stored nor searched; remove it"
            ) from None
        if "dimensions" in str(exc):
            raise EmbedderMismatchError(f"the store {where} refused a vector: {exc}") from exc
        raise StoreError(f"the store {where} failed ({exc})") from exc
    except (psycopg.Error, TimeoutError) as exc:
        raise StoreError(f"the store {where} failed ({exc}); check the server") from exc


def redacted(dsn: str) -> str:
    """The DSN without a password, for messages."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in info.items())
