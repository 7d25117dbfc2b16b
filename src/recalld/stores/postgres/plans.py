"""Generic plans for the search statements whose answers no plan changes.

A search statement's text repeats (29 texts over 100 searches of the tenant of 901 in the
1M-memory, 1,000-tenant database), so psycopg prepares the common ones; PostgreSQL's default
``plan_cache_mode`` still plans each execution for its parameters, 2-3 ms of server CPU.
A generic plan is made once per prepared statement. It may answer differently only where a
plan may be approximate: the vector channel read through an HNSW index instead of scanning
the tenant's vectors exactly. So a handle's connections get ``force_generic_plan`` only
while (a) it sees one namespace of at most :data:`GENERIC_PLANS_MAX_ROWS` memories, whose
own (custom) plans scan its vectors exactly, and (b) the planner's generic plan for the
vector channel scans exactly too (it estimates a namespace from the table's average, not
from this tenant): asked with ``EXPLAIN (GENERIC_PLAN)``, again every
:data:`CHECK_TTL_S`. Measured (docs/design/scale-history.md, "the small tenant's round
trips and plans"): the tenant of 901, 12.5-13.8 -> 10.2-12.8 ms of server CPU a search, the
same top 10s (ids and scores).

A larger tenant's statements that read the vector channel over its live rows alone (no
filter narrower than them, no time window: :func:`~.results.plain_vectors`) run on generic
plans too where the two plans read the vector channel alike (:func:`same_vector_reads`):
the same HNSW index, or none. Such a statement's answer is then the one its own plan gives,
and its text repeats (one per number of phrases), so it is planned once a connection, not
at every search. A statement with a narrower filter keeps the server's default: its own
plan may read the few rows a window admits where a generic one would walk the index.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from recalld.stores.postgres import word_sql
from recalld.stores.postgres.writes import vector_column

GENERIC_PLANS_MAX_ROWS = 2_000
"""Memories (forgotten ones too) a handle's one namespace holds at most for its searches to
run on generic plans: measured at 901 (the 1M database's small tenant, whose custom plans
scan its vectors exactly); a tenant of 100k is read through the HNSW index, where a generic
plan could choose otherwise than the tenant's own plan."""
CHECK_TTL_S = 60.0
"""How long a handle trusts its answer (the statistics, hence the generic plan, change as
tenants grow)."""
CHANNEL_SHAPE = (
    "SELECT m.id FROM memories m WHERE m.namespace = {namespace}"
    " AND m.forgotten_at IS NULL AND m.embedding IS NOT NULL"
    " ORDER BY m.embedding <=> {vector} LIMIT {limit}"
)
"""The vector channel's shape: one namespace, the live rows, nearest first."""
GENERIC_PROBE = "EXPLAIN (GENERIC_PLAN) " + CHANNEL_SHAPE.format(
    namespace="$1", vector="$2::vector", limit=200
)
"""The vector channel's shape as a generic plan."""
GENERIC_WORDS = "word channels only"
"""A search statement that asks no vector channel answers the same on any plan (no
approximate index answers it), so a handle with word postings runs its word statements on
generic plans, each prepared at its first use. The 100k tenant's 100 word statements
(1M database, each prepared, custom against generic plans alternated): mean 20.0 -> 16.6
and 17.5 -> 14.8 ms, the same rows for 100 of 100 (docs/design/postgres-statements.md)."""
PLAIN_FETCH = 216
"""The nearest rows a default search's vector channel fetches (its 200 and
:data:`~.queries.TIE_MARGIN`): the limit :func:`same_vector_reads` plans the channel for."""
HNSW_INDEXES = (
    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " JOIN pg_class t ON t.oid = i.indrelid JOIN pg_am a ON a.oid = c.relam"
    " WHERE t.relname = 'memories' AND a.amname = 'hnsw'"
)


def same_vector_reads(conn: psycopg.Connection[Any], namespace: str, literal: bool) -> bool:
    """Whether the vector channel of ``namespace`` (its live rows, nearest first) is read
    alike by the plan the server makes for its own values and by the generic plan: through
    the same HNSW index, or through none. ``literal``: the handle names the namespace in its
    statements' text (a tenant with its own index), not as a parameter. False where the
    server cannot say (a vector column of no declared dimension, before PostgreSQL 16, any
    error)."""
    named = word_sql.literal(namespace)
    try:
        with conn.transaction():
            dimension = vector_column(conn)[0]
            if dimension is None:
                return False
            unit = "'[" + ",".join(["1"] + ["0"] * (dimension - 1)) + "]'::vector"
            own, generic = _hnsw_reads(
                conn,
                "EXPLAIN " + CHANNEL_SHAPE.format(namespace=named, vector=unit, limit=PLAIN_FETCH),
                "EXPLAIN (GENERIC_PLAN) "
                + CHANNEL_SHAPE.format(
                    namespace=named if literal else "$1", vector="$2::vector", limit="$3"
                ),
            )
    except psycopg.Error:
        return False
    return own == generic


def generic_scans_exactly(conn: psycopg.Connection[Any]) -> bool:
    """Whether the planner's generic plan for the vector channel reads no HNSW index (False
    where the server cannot say: before PostgreSQL 16, or on any error)."""
    try:
        with conn.transaction():
            (reads,) = _hnsw_reads(conn, GENERIC_PROBE)
    except psycopg.Error:
        return False
    return not reads


def _hnsw_reads(conn: psycopg.Connection[Any], *explained: str) -> list[set[str]]:
    """The HNSW indexes the plan of each ``EXPLAIN`` statement of ``explained`` reads."""
    hnsw = {r[0] for r in conn.execute(HNSW_INDEXES).fetchall()}
    found = []
    for sql in explained:
        plan = "\n".join(r[0] for r in conn.execute(sql).fetchall())
        found.append({n for n in hnsw if f" {n} " in f" {plan} " or f" {n}\n" in plan})
    return found


class PlanChoice:
    """Whether a handle's search statements run on generic plans, and what each of its
    connections has been told (forgotten with the connection: a pool replaces them)."""

    def __init__(self) -> None:
        self._generic = False
        self._plain = False
        """Statements whose vector channels read the live rows alone run generic too."""
        self._at = -math.inf
        self._told: weakref.WeakKeyDictionary[psycopg.Connection[Any], bool | None] = (
            weakref.WeakKeyDictionary()
        )

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        """A new connection of the handle: set to the handle's choice as it is made, so
        that its first search sends nothing more."""
        self._told[conn] = False
        self._tell(conn, self._generic)

    def apply(
        self,
        conn: psycopg.Connection[Any],
        visible: Sequence[str],
        rows: int,
        own_index: bool,
    ) -> None:
        """Before a search statement on ``conn`` (``rows``: the memories of ``visible``,
        counted): the handle's choice, asked again every :data:`CHECK_TTL_S`; the
        statement itself runs in :meth:`mode`."""
        if time.monotonic() - self._at >= CHECK_TTL_S:
            small = len(visible) == 1 and rows <= GENERIC_PLANS_MAX_ROWS and not own_index
            self._generic = small and generic_scans_exactly(conn)
            self._plain = (
                not self._generic
                and len(visible) == 1
                and same_vector_reads(conn, visible[0], own_index)
            )
            self._at = time.monotonic()

    def generic(self, exact: bool, plain: bool) -> bool:
        """Whether a statement runs on generic plans: every statement of a small tenant's
        handle, one that is ``exact`` (:data:`GENERIC_WORDS`), one whose vector channels
        read the live rows alone (``plain``) where both plans read them alike."""
        return self._generic or exact or (plain and self._plain)

    @contextmanager
    def mode(self, conn: psycopg.Connection[Any], generic: bool) -> Iterator[None]:
        """A statement sent in the block runs on generic plans or on the server's default,
        as :meth:`generic` said for it (every statement that reads a vector channel runs in
        this, so that none runs on a mode left by another); a change of mode goes in the
        statement's round trip (a pipeline), whose failure closes the connection (its mode
        and prepared statements unknown: the pool replaces it)."""
        if self._told.get(conn) == generic:
            yield
            return
        try:
            with conn.pipeline():
                self._tell(conn, generic)
                yield
        except BaseException:
            self._told[conn] = None
            conn.close()
            raise

    def told(self) -> int:
        """How many connections the handle holds a choice for."""
        return len(self._told)

    def _tell(self, conn: psycopg.Connection[Any], generic: bool) -> None:
        if self._told.get(conn, False) != generic:
            mode = "force_generic_plan" if generic else "auto"
            conn.execute("SELECT set_config('plan_cache_mode', %s, false)", (mode,))
            self._told[conn] = generic
