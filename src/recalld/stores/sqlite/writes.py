"""The SQLite store's writes of memories: each function runs on a connection inside the
store's transaction (:class:`.transactions.Transaction`), and reaches only the rows of
the handle's namespaces (``tenancy``).

A memory is one row of ``memories`` (:mod:`.row_values`), its tags and entities rows of
``memory_tags`` and ``memory_entities``, its vector a row of ``vectors`` (float32 bytes);
the word and trigram indexes follow ``memories`` by the schema's own triggers; each row's
token counts (:mod:`.word_counts`) are written here, with the row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np

from recalld.errors import EmbedderMismatchError, NotFoundError
from recalld.records import Memory
from recalld.stores.base import Tenancy, Vector
from recalld.stores.sqlite import queries as q, row_values, word_counts
from recalld.stores.sqlite.row_values import COLUMNS, MARKS

IDS_PER_QUERY = 500
"""Ids bound in one ``IN (...)``: well under SQLite's limit of bound parameters."""


def insert_rows(
    db: sqlite3.Connection, tenancy: Tenancy, memories: Sequence[Memory], vectors: Vector | None
) -> None:
    """Add the memories (each in the namespace the tenancy gives it) and their vectors."""
    namespaces = [tenancy.namespace_for(m.namespace) for m in memories]
    written = []
    for i, (memory, namespace) in enumerate(zip(memories, namespaces, strict=True)):
        row = row_values.row(memory, namespace, _position(db, memory, namespace))
        cursor = db.execute(f"INSERT INTO memories ({COLUMNS}) VALUES ({MARKS})", row)
        vector = None if vectors is None else vectors[i]
        written.append(cursor.lastrowid or 0)
        _write_children(db, written[-1], memory, vector)
    word_counts.write(db, written, [m.content for m in memories])


def _write_children(db: sqlite3.Connection, pk: int, memory: Memory, vector: Vector | None) -> None:
    db.executemany(
        "INSERT OR IGNORE INTO memory_tags VALUES (?, ?)", [(t, pk) for t in memory.tags]
    )
    db.executemany(
        "INSERT OR IGNORE INTO memory_entities VALUES (?, ?)",
        [(e, pk) for e in memory.entities],
    )
    if vector is not None:
        db.execute(
            "INSERT INTO vectors (pk, vector) VALUES (?, ?)",
            (pk, np.asarray(vector, dtype=np.float32).tobytes()),
        )


def _position(db: sqlite3.Connection, memory: Memory, namespace: str) -> int | None:
    """The memory's given place in its session, else the place after the session's last."""
    if memory.position is not None or memory.session_id is None:
        return memory.position
    found = db.execute(
        "SELECT MAX(position) FROM memories WHERE namespace = ? AND session_id = ?",
        (namespace, memory.session_id),
    ).fetchone()[0]
    return 0 if found is None else int(found) + 1


def replace(
    db: sqlite3.Connection, tenancy: Tenancy, memory: Memory, vector: Vector | None
) -> None:
    """Write the memory over the visible one with its id (its vector too, when given)."""
    assignments = ", ".join(f"{c.strip()} = ?" for c in COLUMNS.split(",")[1:])
    namespace = tenancy.namespace_for(memory.namespace)
    pk = pks(db, tenancy, [memory.id]).get(memory.id)
    if pk is None:
        raise NotFoundError(f"unknown id: no memory with id {memory.id}")
    row = row_values.row(memory, namespace, _position(db, memory, namespace))
    db.execute(f"UPDATE memories SET {assignments} WHERE pk = ?", (*row[1:], pk))
    word_counts.write(db, [pk], [memory.content])  # (the update's trigger dropped the old)
    db.execute("DELETE FROM memory_tags WHERE pk = ?", (pk,))
    db.execute("DELETE FROM memory_entities WHERE pk = ?", (pk,))
    if vector is not None:
        db.execute("DELETE FROM vectors WHERE pk = ?", (pk,))
    _write_children(db, pk, memory, vector)


def pks(db: sqlite3.Connection, tenancy: Tenancy, ids: Sequence[str]) -> dict[str, int]:
    """Row keys of the visible memories with these ids (the tenant's own namespace wins
    when a shared one holds the same id)."""
    found: dict[str, int] = {}
    wall, wall_params = q.namespace_sql(tenancy.visible)
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = list(ids[start : start + IDS_PER_QUERY])
        marks = ",".join("?" * len(chunk))
        for memory_id, pk, _own in db.execute(
            f"SELECT m.id, m.pk, m.namespace = ? AS own FROM memories m"
            f" WHERE m.id IN ({marks}) AND {wall} ORDER BY own",
            [tenancy.tenant, *chunk, *wall_params],
        ):
            found[memory_id] = pk
    return found


def forget(
    db: sqlite3.Connection, tenancy: Tenancy, ids: Sequence[str], *, hard: bool, at: datetime
) -> int:
    """Delete (``hard``) or mark forgotten the visible memories with these ids: how many."""
    found = list(pks(db, tenancy, ids).values())
    marks = ",".join("?" * len(found))
    if hard:
        cursor = db.execute(f"DELETE FROM memories WHERE pk IN ({marks})", found)
    else:
        cursor = db.execute(
            f"UPDATE memories SET forgotten_at = ? WHERE pk IN ({marks}) AND forgotten_at IS NULL",
            [at.timestamp(), *found],
        )
    return cursor.rowcount


def record_access(
    db: sqlite3.Connection, tenancy: Tenancy, ids: Sequence[str], at: datetime
) -> None:
    """Count one access of each visible memory with these ids, at ``at``."""
    found = list(pks(db, tenancy, ids).values())
    marks = ",".join("?" * len(found))
    db.execute(
        f"UPDATE memories SET access_count = access_count + 1, last_accessed_at = ?"
        f" WHERE pk IN ({marks})",
        [at.timestamp(), *found],
    )


def set_fingerprint(db: sqlite3.Connection, fingerprint: str) -> None:
    """The store's embedder (one store, one embedder)."""
    db.execute("INSERT OR REPLACE INTO meta VALUES ('embedding_fingerprint', ?)", (fingerprint,))


def swap_vectors(
    db: sqlite3.Connection,
    tenancy: Tenancy,
    vectors: Mapping[str, Vector],
    fingerprint: str,
    current: str | None,
) -> None:
    """Every visible memory's vector replaced by the one given (none when not given), of
    the embedder ``fingerprint``; refused while other tenants' memories have vectors of
    the ``current`` one."""
    outside, outside_params = q.outside_sql(tenancy.visible)
    wall, wall_params = q.namespace_sql(tenancy.visible)
    if (
        fingerprint != current
        and db.execute(
            f"SELECT 1 FROM vectors v JOIN memories m ON m.pk = v.pk WHERE {outside} LIMIT 1",
            outside_params,
        ).fetchone()
    ):
        raise EmbedderMismatchError(
            "other tenants' memories in this store have vectors of the current "
            "embedder; one store has one embedder, so a reindex with another one "
            "must be run for every tenant of the store at once"
        )
    db.execute(
        f"DELETE FROM vectors WHERE pk IN (SELECT m.pk FROM memories m WHERE {wall})",
        wall_params,
    )
    by_id = dict(
        db.execute(
            f"SELECT m.id, m.pk FROM memories m WHERE {wall} ORDER BY m.namespace = ?",
            [*wall_params, tenancy.tenant],
        ).fetchall()
    )
    db.executemany(
        "INSERT INTO vectors (pk, vector) VALUES (?, ?)",
        [(by_id[i], np.asarray(v, np.float32).tobytes()) for i, v in vectors.items() if i in by_id],
    )
    db.execute(
        f"UPDATE memories SET embedding_fingerprint = ? WHERE {wall.replace('m.', '')}",
        [fingerprint, *wall_params],
    )
    set_fingerprint(db, fingerprint)
