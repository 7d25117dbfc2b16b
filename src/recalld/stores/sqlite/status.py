"""What the SQLite store reports of itself (``recalld status``): counts of the handle's
namespaces, the file's size, the embedder, an unfinished migration, and advice."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from recalld.stores import rows as codec
from recalld.stores.base import StoreStats, day_counts, migration_key
from recalld.stores.sqlite import opening, queries as q
from recalld.stores.sqlite.migrations import SCHEMA_VERSION
from recalld.stores.sqlite.vector_index import older_build


def stats(
    db: sqlite3.Connection, path: str, visible: tuple[str, ...], index_path: Path | None
) -> StoreStats:
    """The store's status as the handle's namespaces see it (``index_path``: the folder of
    the ANN index, if any)."""
    wall, wall_params = q.namespace_sql(visible)
    one = db.execute(
        "SELECT COUNT(*), SUM(m.forgotten_at IS NOT NULL), COUNT(DISTINCT m.session_id),"
        f" MIN(m.ref_time), MAX(m.ref_time) FROM memories m WHERE {wall}",
        wall_params,
    ).fetchone()
    vectors = db.execute(
        f"SELECT COUNT(*) FROM vectors v JOIN memories m ON m.pk = v.pk WHERE {wall}",
        wall_params,
    ).fetchone()[0]
    return StoreStats(
        path=path,
        memories=one[0] - (one[1] or 0),
        forgotten=one[1] or 0,
        with_vectors=vectors,
        fingerprint=fingerprint(db),
        schema_version=SCHEMA_VERSION,
        size_bytes=_size(path),
        by_type=_live_by(db, "m.type", wall, wall_params),
        sessions=one[2],
        oldest=codec.dt(one[3]),
        newest=codec.dt(one[4]),
        by_source=_live_by(db, "m.source_kind", wall, wall_params),
        added_by_day=day_counts(_added_by_day(db, wall, wall_params)),
        unfinished_migration=unfinished_migration(db, visible),
        advice=_advice(path, index_path),
    )


def _live_by(
    db: sqlite3.Connection, column: str, wall: str, params: list[object]
) -> dict[str, int]:
    """How many live memories hold each value of ``column``."""
    rows = db.execute(
        f"SELECT {column}, COUNT(*) FROM memories m WHERE {wall}"
        f" AND m.forgotten_at IS NULL GROUP BY {column}",
        params,
    )
    return dict(rows.fetchall())


def _added_by_day(db: sqlite3.Connection, wall: str, params: list[object]) -> list[tuple[int, int]]:
    """How many memories were added each day (days since 1970)."""
    rows: list[tuple[int, int]] = db.execute(
        f"SELECT CAST(m.created_at / 86400 AS INTEGER) AS day, COUNT(*) FROM memories m"
        f" WHERE {wall} GROUP BY day ORDER BY day",
        params,
    ).fetchall()
    return rows


def _size(path: str) -> int:
    """The file's bytes and its write-ahead log's (0 in memory)."""
    if path == ":memory:":
        return 0
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def fingerprint(db: sqlite3.Connection) -> str | None:
    """The store's embedder, if any."""
    row = db.execute("SELECT value FROM meta WHERE key = 'embedding_fingerprint'")
    found = row.fetchone()
    return None if found is None else str(found[0])


def mark_migration(db: sqlite3.Connection, tenant: str, unfinished: bool) -> None:
    """Set or clear the tenant's mark of a migration begun and not finished."""
    key = migration_key(tenant)
    if unfinished:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, '1')", (key,))
    else:
        db.execute("DELETE FROM meta WHERE key = ?", (key,))


def unfinished_migration(db: sqlite3.Connection, visible: tuple[str, ...]) -> bool:
    """Whether a migration into one of these namespaces was begun and not finished."""
    keys = [migration_key(n) for n in visible]
    marks = ",".join("?" * len(keys))
    found = db.execute(f"SELECT 1 FROM meta WHERE key IN ({marks})", keys).fetchone()
    return found is not None


def _advice(path: str, folder: Path | None) -> tuple[str, ...]:
    exposed = () if path == ":memory:" else opening.exposure_advice(path)
    if not older_build(folder):
        return exposed
    return (
        *exposed,
        f"the ANN index in {folder} was built by an older recalld with a"
        " narrower beam (it misses more of the nearest memories at 1M): delete that"
        " folder and the next search builds a better one (minutes at 1M memories,"
        " once)",
    )
