"""The embedder fingerprint a PostgreSQL store handle knows, so that a search does not read it
in a round trip of its own.

Invariants: a value is handed out (:meth:`KnownFingerprint.get`) without a read only once
a statement has seen it stored since it was read, or this handle wrote it; every statement
whose answer depends on it checks it in its own snapshot (the search statement returns the
stored fingerprint with its rows: :data:`STORED_SQL`; a write of vectors reads it in its
transaction) and refuses when it differs (another process's ``recalld reindex``), so a
value gone stale never lets a search compare, or a write store, vectors of another
embedder.

Why: the engine checks its embedder against the store's fingerprint before each search. As
a statement of its own, that was one of the 6.5 statements a small tenant's search sent in
the 1M database (0.24-0.40 ms a call at the median, 0.6-2.1 ms a search on average under
load; docs/design/postgres-statements.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from recalld.errors import EmbedderMismatchError

KEY = "embedding_fingerprint"
STORED_SQL = f"(SELECT value FROM recalld_meta WHERE key = '{KEY}')"
"""The stored fingerprint as a scalar subquery of a statement (read in its snapshot)."""


class KnownFingerprint:
    """A handle's fingerprint (see the module's invariants): the value last handed out,
    and whether a statement has seen it stored since (then it is handed out without a
    read). One tuple, assigned whole: safe across the handle's threads."""

    def __init__(self) -> None:
        self._known: tuple[str | None, bool] = (None, False)

    def get(self, read: Callable[[], str | None]) -> str | None:
        """The confirmed fingerprint, else ``read()``'s (handed out, to be confirmed by the
        next statement that depends on it: a value that failed the engine's check, or
        one of a store that has none, is read again each time)."""
        value, confirmed = self._known
        if confirmed:
            return value
        value = read()
        self._known = (value, False)
        return value

    def wrote(self, value: str) -> None:
        """The handle stored ``value``."""
        self._known = (value, True)

    def verify(self, stored: str | None) -> None:
        """A statement saw ``stored``: confirm the value handed out, or refuse the statement
        when the store's differs from it (and forget it: the next check reads the
        store's). Nothing handed out yet: nothing to compare."""
        known, _ = self._known
        if known is None:
            return
        if stored == known:
            self._known = (known, True)
            return
        self._known = (None, False)
        raise EmbedderMismatchError(
            "the store's embedder changed while this handle was open (another process ran"
            " `recalld reindex`?); nothing was returned or written: the next call checks"
            " the configured embedder against the one the store now names"
        )

    def verify_in(self, conn: psycopg.Connection[Any]) -> None:
        """:meth:`verify` against the value ``conn``'s transaction reads (a write's)."""
        if self._known[0] is not None:
            found = conn.execute(f"SELECT {STORED_SQL}").fetchone()
            self.verify(None if found is None else found[0])
