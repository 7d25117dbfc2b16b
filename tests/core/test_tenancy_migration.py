"""Migration 7 (tenants): an existing store keeps every row, all in the default tenant."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from recalld.stores.asks import EntitiesAsk, WordsAsk
from recalld.stores.base import Tenancy
from recalld.stores.sqlite import SQLiteStore
from recalld.stores.sqlite.migrations import MIGRATIONS


def _store_at(path: Path, applied: int) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    db.execute("CREATE TABLE migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
               "applied_at REAL NOT NULL)")  # fmt: skip
    for number, name, step in MIGRATIONS[:applied]:
        step(db)
        db.execute("INSERT INTO migrations VALUES (?, ?, 0)", (number, name))
    db.execute("INSERT INTO meta VALUES ('app', 'recalld')")
    for memory_id, content in {"a": "kayak trip on Sunday", "b": "the kayak is red"}.items():
        db.execute(
            "INSERT INTO memories (id, content, type, content_hash, created_at, updated_at,"
            " ref_time, session_id, entities)"
            " VALUES (?, ?, 'event', ?, 0, 0, 0, 's', '[\"kayak\"]')",
            (memory_id, content, memory_id),
        )
        db.execute("INSERT INTO memory_entities SELECT 'kayak', pk FROM memories WHERE id = ?",
                   (memory_id,))  # fmt: skip
    db.execute("INSERT INTO source_roots (path, globs, added_at) VALUES ('/notes', '[]', 0)")
    db.execute("INSERT INTO source_files (path, root, size, mtime_ns, status) VALUES"
               " ('/notes/a.md', '/notes', 1, 1, 'indexed')")  # fmt: skip
    db.execute("COMMIT")
    db.close()


def test_m007_puts_every_row_in_the_default_tenant(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    _store_at(path, 6)
    store = SQLiteStore(path)
    try:
        assert store.stats().schema_version >= 7
        assert [m.namespace for m in store.get_many(["a", "b"])] == ["default", "default"]
        # The full-text index and entity rows still point at the right memories.
        from recalld.stores.base import CandidateRequest

        found = store.candidates(
            CandidateRequest(
                asks={"bm25": WordsAsk(5, ("kayak",)), "entity": EntitiesAsk(5, ("kayak",))}
            )
        )
        assert {c.memory_id for c in found["bm25"]} == {"a", "b"}
        assert {c.memory_id for c in found["entity"]} == {"a", "b"}
        assert [r.path for r in store.source_roots()] == ["/notes"]
        assert [f.path for f in store.source_files()] == ["/notes/a.md"]
    finally:
        store.close()
    other = SQLiteStore(path, Tenancy("alice"))
    try:
        assert other.get_many(["a", "b"]) == []
        assert other.source_roots() == [] and other.source_files() == []
    finally:
        other.close()


def test_m007_runs_on_an_empty_store_and_twice(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    MIGRATIONS[6][2](db)  # idempotent: a run that died half-way is simply run again
    db.execute("COMMIT")
    columns = {row[1] for row in db.execute("PRAGMA table_info(memories)")}
    db.close()
    assert "namespace" in columns


def test_m008_fills_the_session_position_from_storage_order(tmp_path: Path) -> None:
    path = tmp_path / "v7.db"
    _store_at(path, 7)
    store = SQLiteStore(path)
    try:
        assert [m.position for m in store.get_many(["a", "b"])] == [0, 1]
        assert store.session_neighbors(["a"], 1) == {"a": [("b", 1)]}
    finally:
        store.close()
