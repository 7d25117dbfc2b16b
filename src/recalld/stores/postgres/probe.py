"""Whether a PostgreSQL server can run what the store asks of pgvector, checked before the
first vector is written.

A pgvector built for instructions the CPU lacks (AVX-512 on a machine without it) kills the
backend on the first vector function it runs: the client then hears only "server closed the
connection unexpectedly" and the server restarts every connection. The probe runs those
functions first, on a temporary table (which writes no WAL, so a crash leaves nothing to
replay and loses nothing), and turns a failure into one sentence that says what to do.

Invariants:
- the probe changes nothing: its table is temporary and its transaction rolls back;
- a server the role may not probe fully (no ``TEMP`` privilege, a read-only session) is
  probed as far as it may be, never refused for that;
- each DSN is probed once per process (a store opens many handles on one server).
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from recalld.errors import StoreError

PROBE_DIMENSIONS = 64
"""Long enough that pgvector's vectorised loops (8 to 16 floats a step) run, as they do on
an embedder's 384 dimensions."""
PROBE_ROWS = 40
"""Enough rows that the HNSW build links several layers; a build of them takes a few ms."""
PROBE_TARGET = 7
"""The row whose own vector the index query asks for: the index must return it first."""

_VECTOR_OF_ROW = (
    "(SELECT array_agg(sin(i * j + j)::real ORDER BY j)"
    f" FROM generate_series(1, {PROBE_DIMENSIONS}) j)::vector({PROBE_DIMENSIONS})"
)
"""Row ``i``'s vector, made by pgvector's array cast (its ``array_to_vector``)."""
STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "compute a vector distance",
        (
            f"SELECT v <=> w, v <-> w, v <#> w, vector_norm(l2_normalize(v))"
            f" FROM (SELECT {_VECTOR_OF_ROW.replace('i *', '2 *')} v,"
            f" {_VECTOR_OF_ROW.replace('i *', '3 *')} w) s",
        ),
    ),
    (
        "write vectors",
        (
            f"CREATE TEMP TABLE recalld_probe ON COMMIT DROP AS"
            f" SELECT i, {_VECTOR_OF_ROW} v FROM generate_series(1, {PROBE_ROWS}) i",
        ),
    ),
    ("build an HNSW index", ("CREATE INDEX ON recalld_probe USING hnsw (v vector_cosine_ops)",)),
    (
        "search an HNSW index",
        (
            "SET LOCAL enable_seqscan = off",
            f"SELECT i FROM recalld_probe ORDER BY v <=>"
            f" (SELECT v FROM recalld_probe WHERE i = {PROBE_TARGET}) LIMIT 1",
        ),
    ),
)
"""What the store asks of pgvector, in the order it first asks it: (what, SQL)."""

_NOT_MINE = (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)
"""Refusals that say the role may not probe further, not that the server cannot."""

_probed: set[str] = set()
_lock = threading.Lock()


class ServerCannotRunVectors(StoreError):
    """The server failed (or crashed) running pgvector: the store cannot work there."""


def check_vectors(conn: psycopg.Connection[Any], where: str, remedy: str) -> None:
    """Run :data:`STEPS` on ``conn`` (autocommit) in a transaction that rolls back; raise
    :class:`ServerCannotRunVectors` naming the step that failed and ``remedy``."""
    try:
        conn.execute("BEGIN")
    except psycopg.OperationalError as exc:  # the session was lost before the first step
        raise _crashed(conn, STEPS[0][0], where, remedy, exc) from exc
    try:
        for what, statements in STEPS:
            if not _step(conn, what, statements, where, remedy):
                break
    finally:
        if not (conn.closed or conn.broken):
            conn.execute("ROLLBACK")


def check_vectors_once(dsn: str, conn: psycopg.Connection[Any], where: str) -> None:
    """:func:`check_vectors` for the store, once per ``dsn`` and process."""
    with _lock:
        if dsn in _probed:
            return
    check_vectors(conn, where, STORE_REMEDY)
    with _lock:
        _probed.add(dsn)


STORE_REMEDY = (
    "use a PostgreSQL whose pgvector runs on this machine (for `recalld postgres start`'s "
    "server: recalld postgres stop, then upgrade recalld's postgres extra, then start again)"
)


def _step(
    conn: psycopg.Connection[Any],
    what: str,
    statements: tuple[str, ...],
    where: str,
    remedy: str,
) -> bool:
    """One step; False when the role may not go further."""
    try:
        cur = conn.cursor()
        for statement in statements:
            cur.execute(statement)
        rows = cur.fetchall() if cur.description is not None else []
    except _NOT_MINE:
        return False
    except psycopg.OperationalError as exc:
        raise _crashed(conn, what, where, remedy, exc) from exc
    except psycopg.Error as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ServerCannotRunVectors(
            f"the PostgreSQL server {where} cannot {what} ({first}): {remedy}"
        ) from exc
    if what.startswith("search") and rows != [(PROBE_TARGET,)]:
        raise ServerCannotRunVectors(
            f"the PostgreSQL server {where} answered a vector search wrongly (rows {rows} "
            f"instead of {PROBE_TARGET}): {remedy}"
        )
    return True


def _crashed(
    conn: psycopg.Connection[Any],
    what: str,
    where: str,
    remedy: str,
    exc: psycopg.OperationalError,
) -> Exception:
    """The error for a session lost while asked to do ``what`` (``exc`` itself when the
    connection still stands: not a crash)."""
    if not (conn.closed or conn.broken):
        return exc
    return ServerCannotRunVectors(
        f"the PostgreSQL server {where} crashed when asked to {what} (its pgvector most "
        f"likely uses CPU instructions this machine lacks, such as AVX-512): {remedy}"
    )
