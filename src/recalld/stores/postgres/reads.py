"""Reads of a PostgreSQL store apart from the search statement: the follow reads of a
search (session members, vectors), duplicates of new memories, and every memory in batches
(``recalld migrate``, ``reindex``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from recalld.records import Memory
from recalld.stores.base import DedupKey, Vector
from recalld.stores.postgres import queries as q, results as res

Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
"""A store handle's connection, for one statement."""


def meta(connect: Connect, key: str) -> str | None:
    """The store's fact ``key`` (``recalld_meta``), read in a statement of its own."""
    with connect() as conn:
        return res.get_meta(conn, key)


def session_members(
    conn: psycopg.Connection[Any], visible: list[str], ids: Sequence[str]
) -> list[Any]:
    """(id, namespace, session) of the live members of the sessions of ``ids``, in order."""
    return conn.execute(
        "SELECT m.id, m.namespace, m.session_id FROM memories m"
        " WHERE (m.namespace, m.session_id) IN (SELECT s.namespace, s.session_id"
        " FROM memories s WHERE s.id = ANY(%s) AND s.namespace = ANY(%s))"
        " AND m.forgotten_at IS NULL ORDER BY m.namespace, m.session_id, m.position, m.pk",
        (list(ids), visible),
    ).fetchall()


def vectors(
    conn: psycopg.Connection[Any], visible: list[str], tenant: str, ids: Sequence[str]
) -> dict[str, Vector]:
    """The vectors of the memories ``ids`` (the tenant's own wins)."""
    rows = conn.execute(
        "SELECT id, embedding FROM memories WHERE id = ANY(%s) AND namespace = ANY(%s)"
        " AND embedding IS NOT NULL ORDER BY namespace = %s",
        (list(ids), visible, tenant),
        binary=True,  # as search_rows: floats, not text to parse
    ).fetchall()
    return dict(rows)  # float32 arrays (loaders.VectorArrayBinaryLoader)


def find_duplicates(
    conn: psycopg.Connection[Any], visible: list[str], keys: Sequence[DedupKey]
) -> dict[DedupKey, str]:
    """The id of a live memory for each of ``keys`` the namespaces ``visible`` hold."""
    wanted = set(keys)
    found: dict[DedupKey, str] = {}
    rows = conn.execute(
        "SELECT id, content_hash, scope, project, session_id, namespace FROM memories"
        " WHERE content_hash = ANY(%s) AND namespace = ANY(%s) AND forgotten_at IS NULL"
        " ORDER BY pk",
        (sorted({k[0] for k in keys}), visible),
    ).fetchall()
    for r in rows:
        key = (r[1], r[2], r[3], r[4], r[5])
        if key in wanted:
            found.setdefault(key, r[0])
    return found


def exported(
    connect: Connect, visible: list[str], batch: int
) -> Iterator[list[tuple[Memory, Vector | None]]]:
    """Every memory of the namespaces ``visible`` with its vector, ``batch`` at a time."""
    last = 0
    while True:
        with connect() as conn:
            rows = conn.execute(
                f"SELECT m.pk, {q.SELECT_COLUMNS}, m.embedding FROM memories m"
                " WHERE m.pk > %s AND m.namespace = ANY(%s) ORDER BY m.pk LIMIT %s",
                (last, visible, batch),
            ).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        yield [
            (
                res.memory(r[1:-1]),
                r[-1],  # None or a float32 array (loaders)
            )
            for r in rows
        ]


def contents(connect: Connect, visible: list[str], batch: int) -> Iterator[list[tuple[str, str]]]:
    """(id, text to embed) of every memory of the namespaces ``visible``, ``batch`` at a time."""
    last = 0
    while True:
        with connect() as conn:
            rows = conn.execute(
                "SELECT pk, id, content, embed_context FROM memories WHERE pk > %s"
                " AND namespace = ANY(%s) ORDER BY pk LIMIT %s",
                (last, visible, batch),
            ).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        yield [(r[1], f"{r[3]}\n{r[2]}" if r[3] else r[2]) for r in rows]
