"""The SQLite store serves memories it read before while no write is committed
(stores/sqlite/row_cache.py), and never one a write has changed since: written through
the same connection, another thread's, another handle's or another process's."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory
from recalld.stores.base import Tenancy
from recalld.stores.sqlite import row_cache
from recalld.stores.sqlite.store import SQLiteStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def made(path: Path, count: int = 5) -> None:
    with recalld.open(settings=Settings(db=path, cache_dir=None), embedder=FakeEmbedder()) as e:
        e.add_many(
            [
                NewMemory(content=f"note {i}", id=f"m{i}", metadata={"role": "user", "n": [i]})
                for i in range(count)
            ]
        )


def row_reads(store: SQLiteStore) -> list[str]:
    """Record the statements that read memories' rows on this thread's connection."""
    seen: list[str] = []
    store._db.set_trace_callback(
        lambda sql: seen.append(sql) if "FROM memories m WHERE m.id IN" in sql else None
    )
    return seen


def test_rows_read_again_are_served_without_reading(tmp_path: Path) -> None:
    made(tmp_path / "m.db")
    store = SQLiteStore(tmp_path / "m.db")
    try:
        first = store.get_many(["m1", "m2", "nope"])
        reads = row_reads(store)
        again = store.get_many(["m2", "m1", "m2"])
        assert reads == []  # every row served from what the first call read
        assert [m.id for m in again] == ["m2", "m1", "m2"]
        assert {m.id: m for m in again} == {m.id: m for m in first}
        store.get_many(["m3", "nope"])
        assert len(reads) == 1  # the others are read, an unknown id every time
    finally:
        store.close()


def test_a_served_memory_is_a_copy_its_caller_may_change(tmp_path: Path) -> None:
    made(tmp_path / "m.db")
    store = SQLiteStore(tmp_path / "m.db")
    try:
        (first,) = store.get_many(["m1"])
        first.metadata["role"] = "changed"
        first.metadata["n"].append(99)
        (again,) = store.get_many(["m1"])
        assert again.metadata == {"role": "user", "n": [1]}
        again.metadata["n"].append(7)
        assert store.get_many(["m1"])[0].metadata == {"role": "user", "n": [1]}
    finally:
        store.close()


def test_writes_from_anywhere_are_seen(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    made(path)
    settings = Settings(db=path, cache_dir=None)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        assert store.get_many(["m1"])[0].content == "note 1"
        # this handle, this thread's connection
        engine.update("m1", content="note 1, changed here")
        assert store.get_many(["m1"])[0].content == "note 1, changed here"
        # this handle, another thread's connection
        done = threading.Thread(target=engine.update, args=("m1",), kwargs={"content": "t"})
        done.start()
        done.join()
        assert store.get_many(["m1"])[0].content == "t"
        # another handle in this process
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as other:
            other.update("m1", content="another handle")
        assert store.get_many(["m1"])[0].content == "another handle"
        # another process
        script = (
            "import sys, recalld\n"
            "from recalld.config import Settings\n"
            "from recalld.providers.embedders import FakeEmbedder\n"
            "with recalld.open(settings=Settings(db=sys.argv[1], cache_dir=None),"
            " embedder=FakeEmbedder()) as e:\n"
            "    e.update('m1', content='another process')\n"
        )
        subprocess.run([sys.executable, "-c", script, str(path)], check=True)
        assert store.get_many(["m1"])[0].content == "another process"
        # forgetting, and counting an access
        engine.forget("m2")
        assert store.get_many(["m2"])[0].forgotten_at is not None
        store.record_access(["m3"], NOW)
        assert store.get_many(["m3"])[0].access_count == 1
        engine.forget("m4", hard=True)
        assert store.get_many(["m4"]) == []


def test_rows_read_inside_a_transaction_are_not_kept(tmp_path: Path) -> None:
    """A write that reads what it wrote and rolls back leaves nothing to serve."""
    made(tmp_path / "m.db")
    store = SQLiteStore(tmp_path / "m.db")
    try:
        store.get_many(["m1"])
        db = store._db
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE memories SET content = 'rolled back' WHERE id = 'm1'")
        assert store.get_many(["m1"])[0].content == "rolled back"
        db.execute("ROLLBACK")
        assert store.get_many(["m1"])[0].content == "note 1"
    finally:
        store.close()


def test_tenants_never_share_what_they_read(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    for tenant in ("alice", "bob"):
        settings = Settings(db=path, cache_dir=None, tenant=tenant)
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as e:
            e.add(f"{tenant}'s secret", id="same-id")
    alice = SQLiteStore(path, Tenancy("alice"))
    bob = SQLiteStore(path, Tenancy("bob"))
    carol = SQLiteStore(path, Tenancy("carol"))
    try:
        for _ in range(2):
            assert [m.content for m in alice.get_many(["same-id"])] == ["alice's secret"]
            assert [m.content for m in bob.get_many(["same-id"])] == ["bob's secret"]
            assert carol.get_many(["same-id"]) == []
    finally:
        for store in (alice, bob, carol):
            store.close()


def test_the_process_keeps_at_most_rows_kept(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(row_cache, "ROWS_KEPT", 3)
    made(tmp_path / "m.db", 6)
    store = SQLiteStore(tmp_path / "m.db")
    try:
        store.get_many([f"m{i}" for i in range(6)])
        assert len(row_cache._kept) <= 3
        reads = row_reads(store)
        assert [m.id for m in store.get_many(["m5", "m0"])] == ["m5", "m0"]
        assert len(reads) == 1  # m5 kept (read last), m0 dropped and read again
        assert "m.id IN ('m0')" in reads[0]
    finally:
        store.close()
    assert all(handle != store._row_cache._handle for handle, _ in row_cache._kept)
