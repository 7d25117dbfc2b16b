from __future__ import annotations

import sqlite3
from pathlib import Path

from recalld.stores.sqlite import SQLiteStore
from recalld.stores.sqlite.migrations import MIGRATIONS, m001_initial, m002_sources, migrate


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_m002_from_empty(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "new.db")
    store.close()
    db = sqlite3.connect(tmp_path / "new.db")
    assert {"source_roots", "source_files"} <= _tables(db)
    assert [r[1] for r in db.execute("SELECT * FROM migrations ORDER BY id")] == [
        name for _, name, _ in MIGRATIONS]  # fmt: skip


def test_m002_from_version_1_keeps_memories(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    m001_initial(db)
    db.execute("CREATE TABLE migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
               "applied_at REAL NOT NULL)")  # fmt: skip
    db.execute("INSERT INTO migrations VALUES (1, 'm001_initial', 0)")
    db.execute("INSERT INTO meta VALUES ('app', 'recalld')")
    db.execute("INSERT INTO memories (id, content, type, content_hash, created_at, updated_at,"
               " ref_time) VALUES ('m1', 'kept', 'event', 'h', 0, 0, 0)")  # fmt: skip
    db.execute("COMMIT")
    db.close()
    store = SQLiteStore(path)
    try:
        assert [m.content for m in store.get_many(["m1"])] == ["kept"]
        assert store.source_files() == [] and store.source_roots() == []
        assert store.stats().schema_version == MIGRATIONS[-1][0]
        assert [m[1] for m in MIGRATIONS[:2]] == ["m001_initial", "m002_sources"]
    finally:
        store.close()


def test_m002_is_idempotent(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    migrate(db)
    m002_sources(db)  # running it again changes nothing and does not fail
    assert migrate(db) == []
