"""A tenant's word postings, built by the write that brings it to
:data:`~recalld.stores.postgres.indexes.WORD_POSTINGS_ADVISED_ROWS` memories, as the SQLite
store builds its word index by itself.

Why: without them the word channel reads and scores every row holding a question's word,
and as the application's role (Row-Level Security) every row of the tenant: at 10k memories
a search's word statement took 47 ms of execution against 13 with them, and a one-tenant
store of 10k answered 32 clients at 19.9 searches/s within p99 150 ms against 34.7
(docs/benchmarks-scale.md). Until now they waited for ``recalld postgres word-index``.

:class:`WordsWhenDue` is a part of :class:`~recalld.stores.postgres.store.PostgresStore` (a
base class). After each write it adds the memories written to the handle's count of the
tenant's memories (:meth:`Searching._rows_counted`, counted again from the word statistics
when the sum reaches the size, or every minute); when these writes took the tenant past
the size, it builds the postings as the command does, in a transaction of their own after
the write's (which holds the tenant's writes about 2 s at 10k; searches go on), then their
statistics. A tenant already past the size before (a store of an earlier recalld) is left
to the command, which ``recalld status`` advises: a write does not stall for a large build
it did not bring about. A role that may not build
them (a build refused by the server) writes on as before: the refusal is logged once,
``recalld status`` goes on advising the command. A handle that sees shared namespaces never
builds them (postings rank one namespace's rows), nor does a bulk load before its end.
Other handles learn of them at their next count (:meth:`Searching._rows_counted`).
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg

from recalld.stores.postgres import indexes as ix

log = logging.getLogger("recalld")


class Handle(Protocol):
    """What the build when due needs of a store handle."""

    _dsn: str
    _visible: list[str]
    _word_postings: bool
    _deferring: bool
    _words_refused: bool
    _unseen_writes: int

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    def _rows_counted(self, fresh: bool = False) -> tuple[int, int]: ...


class WordsWhenDue:
    """The word postings a write brings due (the module's docstring)."""

    def _words_when_due(self: Handle, written: int) -> None:
        """After a write of ``written`` memories (0: a bulk load's end): build the tenant's
        word postings if it now holds :data:`ix.WORD_POSTINGS_ADVISED_ROWS` memories."""
        self._unseen_writes += written
        if (
            self._word_postings
            or self._words_refused
            or self._deferring
            or len(self._visible) != 1
            or not self._unseen_writes
        ):
            return
        mine = self._unseen_writes
        seen, _ = self._rows_counted()
        if self._unseen_writes:  # a count from before these writes
            if seen + mine < ix.WORD_POSTINGS_ADVISED_ROWS:
                return
            seen, _ = self._rows_counted(fresh=True)
        if self._word_postings or not seen - mine < ix.WORD_POSTINGS_ADVISED_ROWS <= seen:
            return  # built meanwhile, below the size, or past it before these writes
        namespace = self._visible[0]
        try:
            with self._conn() as conn:
                ix.lock_word_postings(conn, namespace)
                if ix.Indexes.read(conn, self._visible).word_postings:
                    self._word_postings = True  # another handle built them meanwhile
                    return
                written_postings = ix.build_word_postings(conn, namespace)
        except psycopg.Error as exc:
            self._words_refused = True
            log.warning(
                "word postings for %r not built (%s); `recalld postgres word-index` builds"
                " them with a role that may",
                namespace,
                str(exc).strip().splitlines()[0],
            )
            return
        self._word_postings = True
        log.info("word postings built for %r: %d", namespace, written_postings)
        try:
            ix.vacuum_word_postings(self._dsn)
        except psycopg.Error as exc:  # statistics only: the postings answer without them
            log.info("word postings' statistics not refreshed: %s", exc)
