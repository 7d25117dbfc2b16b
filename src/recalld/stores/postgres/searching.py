"""A PostgreSQL store's reads for a search: the channels' one statement
(:meth:`Searching.search_rows`, built by :mod:`recalld.stores.postgres.queries`), the rows,
session members and vectors the later stages ask for, and the counts that choose how the
word channel reads.

:class:`Searching` is a part of :class:`~recalld.stores.postgres.store.PostgresStore` (a
base class, as :class:`~recalld.stores.postgres.admin.Administration` is): its methods use
the handle's connections, what it sees and what it has learnt of its tenant's indexes
(declared below, set by the store)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import psycopg

from recalld import threads
from recalld.errors import EmbedderMismatchError
from recalld.lexical import phrases
from recalld.records import Memory
from recalld.stores.base import (
    CandidateRequest,
    ChannelCandidate,
    SearchRows,
    Tenancy,
    Vector,
    WordsAsk,
    neighbors_in_sessions,
)
from recalld.stores.postgres import indexes as ix, queries as q, ranked, reads, results as res
from recalld.stores.postgres.fingerprint import KnownFingerprint
from recalld.stores.postgres.migrations import WORDS_GONE
from recalld.stores.postgres.plans import PlanChoice
from recalld.stores.postgres.statements import execute as execute_named

T = TypeVar("T")

ROWS_DEPTH = 50
"""A search's one statement also returns the rows (and vectors) of the candidates ranked
within this in some channel, and of the top candidates' session neighbours; the pipeline
reads the few others it keeps in one or two more single-statement lookups. Rows cost the
client more than those round trips: reading every candidate's row (about 1,000 with the
neighbours of all 200 of the first channel list) took a 10k search 107 ms on average,
reading these 39-46 ms (docs/postgres.md)."""
PARALLEL_READS_MIN_ROWS = 50_000
"""From this many memories in the namespaces a handle sees, a search reads its word channels
in a statement of their own, on a second connection, while it embeds the query and reads
the vector channels in another (:meth:`Searching.parallel_reads`): the tenant of 100k in
the 1M database went from 154 / 235 to 103 / 191 ms (p50 / p95), a tenant of 900 gains
nothing from it (25.5 / 34.4 against 24.4 / 34.2 ms), the same top 10s either way."""
VISIBLE_ROWS_TTL_S = 60.0
"""How long a handle trusts its count of the memories it sees (for
:data:`PARALLEL_READS_MIN_ROWS`, the word channel's engine) before counting again."""


class Searching:
    """The reads of a search on a PostgreSQL store handle."""

    tenancy: Tenancy
    channels: frozenset[str]
    _visible: list[str]
    _own_beam: int
    """The build beam of the tenant's own vector index, 0 without one (:class:`ix.Indexes`)."""
    _word_postings: bool
    _word_ranked: bool
    """The postings ranked by a BM25 index (:mod:`.ranked`)."""
    _walled: bool
    _ef: int
    _visible_count: tuple[int, int, float]
    """(memories seen, in the table, when counted): see :meth:`_rows_counted`."""
    _unseen_writes: int
    """Memories this handle wrote since it last counted (:mod:`.words_due`)."""
    _plans: PlanChoice
    _fingerprint: KnownFingerprint

    if TYPE_CHECKING:

        def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

        def _read(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

        def _dimension(self, conn: psycopg.Connection[Any]) -> int | None: ...

    @property
    def _own_index(self) -> bool:
        """Whether the tenant's rows have a vector index of their own (``_own_beam``)."""
        return self._own_beam > 0

    def get_many(self, ids: Sequence[str]) -> list[Memory]:
        if not ids:
            return []
        with self._read() as conn:  # a search's reads: no BEGIN / COMMIT round trips
            return self._get_many(conn, ids)

    def _get_many(self, conn: psycopg.Connection[Any], ids: Sequence[str]) -> list[Memory]:
        rows = conn.execute(
            f"SELECT {q.SELECT_COLUMNS} FROM memories m WHERE m.id = ANY(%s)"
            " AND m.namespace = ANY(%s) ORDER BY m.namespace = %s",
            (list(ids), self._visible, self.tenancy.tenant),
        ).fetchall()
        found = {r[0]: res.memory(r) for r in rows}
        return [found[i] for i in ids if i in found]

    def session_neighbors(
        self, ids: Sequence[str], radius: int
    ) -> dict[str, list[tuple[str, int]]]:
        if not ids or radius < 1:
            return {}
        with self._read() as conn:
            rows = reads.session_members(conn, self._visible, ids)
        return neighbors_in_sessions(rows, ids, radius)

    def vectors_for(self, ids: Sequence[str]) -> dict[str, Vector]:
        if not ids:
            return {}
        with self._read() as conn:
            return reads.vectors(conn, self._visible, self.tenancy.tenant, ids)

    def exact_vectors(self) -> bool:
        return False  # the planner may answer from the HNSW index, whichever the table's size

    def _candidates_sql(
        self, request: CandidateRequest, conn: psycopg.Connection[Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The request's statement, to be sent on ``conn``, which first reads a BM25
        index's word winners when the tenant's postings are ranked (:meth:`_winners`;
        without ``conn``, the postings' statement)."""
        where, params = q.filter_sql(request.filters, self._visible, self._own_index)
        # Under a filter narrower than the live rows, the postings' rows are read in score
        # order until enough pass, or the few rows the filter's indexed part admits first.
        live = res.live_rows_only(request.filters)
        narrowed = None if live else q.narrowing_sql(request.filters)
        counted = self._rows_counted()
        winners = self._winners(request, conn, counted[0]) if live and conn is not None else None
        words = ix.word_engine(
            self._visible,
            self._word_postings,
            narrowed,
            *counted,
            self._walled,
            ranked=winners is not None,
        )
        asked = res.asked(request, self.channels)
        sql, more = q.candidates_sql(request, where, asked, q.readers(words))
        values: dict[str, Any] = {**params, **more}
        if winners is not None:
            values["lex_w"] = winners
        if request.query_vector is not None:
            values["qv"] = np.asarray(request.query_vector, np.float32)
        return sql, values

    def _winners(
        self, request: CandidateRequest, conn: psycopg.Connection[Any], visible_rows: int
    ) -> list[int] | None:
        """The pks of the tenant's BM25 index's best rows for the request's words, when its
        postings are ranked, it holds ``visible_rows`` of at least :data:`.ranked.MIN_ROWS`
        and every phrase is one token (:mod:`.ranked`); else None."""
        ask = request.asks.get("bm25")
        if not (self._word_ranked and self._word_postings and isinstance(ask, WordsAsk)):
            return None
        if visible_rows < ranked.MIN_ROWS:
            return None
        query = phrases(ask.terms)
        if not ranked.single_tokens(query):
            return None
        found = ranked.winners(conn, self._visible[0], query, ask.limit)
        if found is None:
            self._word_ranked = False  # dropped: the postings answer until it is back
        return found

    def candidates(self, request: CandidateRequest) -> dict[str, list[ChannelCandidate]]:
        out = res.channels(request)
        if not res.asked(request, self.channels):
            return out  # no statement to send

        def run() -> list[Any]:
            generic = self._plans.generic(False, res.plain_vectors([request]))
            self._rows_counted()  # counted again (its own connection) before this one's
            with self._conn() as conn:
                sql, values = self._candidates_sql(request, conn)
                with self._plans.mode(conn, generic):
                    if request.query_vector is not None:
                        have = self._dimension(conn)
                        if have is not None and have != request.query_vector.shape[-1]:
                            raise EmbedderMismatchError(
                                f"query vector has {request.query_vector.shape[-1]} dimensions,"
                                f" the store's vectors have {have}"
                            )
                    return conn.execute(sql, values).fetchall()

        for channel, rank, memory_id, score in self._postings_guard(run):
            out.setdefault(channel, []).append(ChannelCandidate(memory_id, rank, float(score)))
        return out

    def parallel_reads(self) -> bool:
        """From :data:`PARALLEL_READS_MIN_ROWS` memories seen, while this search is the only
        one in flight in the process: the word statement then takes long enough that
        running it beside the vector one pays for the second round trip, and the server has
        a core for it (a server answering several searches at once has none to spare)."""
        return threads.alone() and self._rows_counted()[0] >= PARALLEL_READS_MIN_ROWS

    def _rows_counted(self, fresh: bool = False) -> tuple[int, int]:
        """The memories (forgotten ones too) of the namespaces the handle sees and of the
        table, from the word statistics, counted again after :data:`VISIBLE_ROWS_TTL_S`
        (``fresh``: now)."""
        visible, table, at = self._visible_count
        if not fresh and time.monotonic() - at < VISIBLE_ROWS_TTL_S:
            return visible, table
        with self._read() as conn:
            visible, table = ix.word_rows(conn, self._visible)
            if not (self._word_postings and self._word_ranked) and len(self._visible) == 1:
                # Built since the handle opened (by another handle's write, or the command).
                has = ix.Indexes.read(conn, self._visible)
                self._word_postings, self._word_ranked = has.word_postings, has.ranked
        self._visible_count = (visible, table, time.monotonic())
        self._unseen_writes = 0
        return visible, table

    def search_rows(
        self,
        requests: Sequence[CandidateRequest],
        *,
        vectors: bool = False,
        neighbor_radius: int = 0,
        neighbor_depth: int = 0,
        candidate_vectors: bool = False,
    ) -> SearchRows:
        """One statement, sent in one round trip (autocommit: no BEGIN / COMMIT); with
        ``candidate_vectors``, every candidate's vector of the first request in it too (as
        the vector channel's completion reads them, :func:`queries.search_rows_sql`)."""
        vectors = vectors or candidate_vectors

        def run() -> tuple[list[bool], list[Any]]:
            self._rows_counted()  # counted again (its own connection) before this one's
            with self._read() as conn:
                blocks = [self._candidates_sql(r, conn) for r in requests]
                sql, values = q.search_rows_sql(
                    [b for b in blocks if b[0]],
                    vectors=vectors,
                    radius=max(neighbor_radius, 0),
                    depth=neighbor_depth,
                    rows_depth=ROWS_DEPTH,
                    complete=candidate_vectors
                    or (bool(requests) and "semantic" in requests[0].asks),
                )
                values.update(namespaces=self._visible, tenant=self.tenancy.tenant)
                exact = self._word_postings and res.words_only(requests)  # GENERIC_WORDS
                plain = res.plain_vectors(requests)
                self._plans.apply(conn, self._visible, self._visible_count[0], self._own_index)
                generic = self._plans.generic(exact, plain)
                narrowed = False
                try:
                    with (
                        self._plans.mode(conn, generic),
                        ix.near_memory(conn, requests, self._ef) as narrowed,
                    ):
                        # Binary: vectors as 1.5 KB of floats, not 4-6 KB of text to
                        # parse (a third of a 100k search's time); the same bits.
                        # A generic plan is made once per prepared statement: so prepared
                        # at its first use.
                        cursor = execute_named(conn, sql, values, binary=True, prepare=generic)
                    return [bool(b[0]) for b in blocks], cursor.fetchall()
                except psycopg.Error as exc:
                    if narrowed:  # the pipeline's connection: the pool replaces it
                        conn.close()
                    if not isinstance(exc, psycopg.errors.DataException) or (
                        "different vector dimensions" not in str(exc)
                    ):
                        raise
                    raise EmbedderMismatchError(
                        f"the query vector's dimensions differ from the store's vectors ({exc})"
                    ) from exc

        asked, rows = self._postings_guard(run)
        if rows and rows[0][0] == "fp":  # first in the statement's order
            self._fingerprint.verify(rows[0][4])
            rows = rows[1:]
        return res.search_rows(requests, asked, rows, vectors, neighbor_radius, neighbor_depth)

    def _postings_guard(self, run: Callable[[], T]) -> T:
        """``run()``, which builds and sends a statement; once more without the word
        postings if they were dropped since the handle opened (a statement that reads them
        first checks that they are still there, and refuses otherwise: ``WORDS_GONE``)."""
        try:
            return run()
        except psycopg.Error as exc:
            if exc.sqlstate != WORDS_GONE or not self._word_postings:
                raise
            self._word_postings = self._word_ranked = False
            return run()
