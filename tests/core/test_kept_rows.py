"""Memories read by id kept between reads while the store is unchanged
(stores/sqlite/kept_rows.py): read once, then found without a statement; dropped at any
commit, the handle's own or another connection's or process's; never filled inside a
caller's transaction; never shared between tenants; each copy handed out its own."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from recalld.records import Memory
from recalld.stores.base import DEFAULT_TENANT, Tenancy
from recalld.stores.sqlite import SQLiteStore, kept_rows
from recalld.text import content_hash

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def _memory(memory_id: str, text: str) -> Memory:
    return Memory(
        id=memory_id, content=text, content_hash=content_hash(text), type="insight",
        created_at=NOW, updated_at=NOW, metadata={"source": "test"},
    )  # fmt: skip


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "kept.db"


@pytest.fixture
def store(path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(path)
    opened.insert([_memory(f"m{i}", f"row {i} about kayaks") for i in range(20)], None)
    yield opened
    opened.close()


def _row_reads(store: SQLiteStore) -> list[str]:
    """The statements reading memories by id on this thread's connection, from now on."""
    seen: list[str] = []
    store._db.set_trace_callback(
        lambda sql: seen.append(sql) if "FROM memories m WHERE m.id IN" in sql else None
    )
    return seen


def _contents(store: SQLiteStore, ids: list[str]) -> list[str]:
    return [m.content for m in store.get_many(ids)]


def test_a_row_read_again_unchanged_is_found_without_a_statement(store: SQLiteStore) -> None:
    first = store.get_many(["m1", "m2", "m3"])
    reads = _row_reads(store)
    again = store.get_many(["m3", "m1", "m2", "m4"])
    assert [m.id for m in again] == ["m3", "m1", "m2", "m4"]
    assert again[1] == first[0] and again[0] == first[2]
    assert len(reads) == 1 and "IN ('m4')" in reads[0]  # m4 alone was read


def test_the_handles_own_write_drops_what_was_kept(store: SQLiteStore) -> None:
    assert _contents(store, ["m1"]) == ["row 1 about kayaks"]
    store.replace(_memory("m1", "row 1 now about canoes"), None)
    assert _contents(store, ["m1"]) == ["row 1 now about canoes"]
    store.forget(["m2"], hard=True, at=NOW)
    assert _contents(store, ["m1", "m2"]) == ["row 1 now about canoes"]


def test_another_connections_commit_drops_what_was_kept(store: SQLiteStore, path: Path) -> None:
    assert _contents(store, ["m5"]) == ["row 5 about kayaks"]
    other = SQLiteStore(path)
    other.replace(_memory("m5", "row 5 rewritten by another handle"), None)
    other.close()
    assert _contents(store, ["m5"]) == ["row 5 rewritten by another handle"]


def test_another_processs_commit_drops_what_was_kept(store: SQLiteStore, path: Path) -> None:
    assert _contents(store, ["m6"]) == ["row 6 about kayaks"]
    subprocess.run(
        [sys.executable, "-c", "import sqlite3, sys;"
         " c = sqlite3.connect(sys.argv[1]);"
         " c.execute(\"UPDATE memories SET content = 'row 6 from elsewhere' WHERE id = 'm6'\");"
         " c.commit()", str(path)],
        check=True,
    )  # fmt: skip
    assert _contents(store, ["m6"]) == ["row 6 from elsewhere"]


def test_rows_read_inside_a_rolled_back_transaction_are_not_kept(store: SQLiteStore) -> None:
    db = store._db
    db.execute("BEGIN")
    db.execute("UPDATE memories SET content = 'never committed' WHERE id = 'm7'")
    assert _contents(store, ["m7"]) == ["never committed"]
    db.execute("ROLLBACK")
    assert _contents(store, ["m7"]) == ["row 7 about kayaks"]
    assert _contents(store, ["m7"]) == ["row 7 about kayaks"]


def test_a_copy_changed_by_its_caller_changes_nothing_kept(store: SQLiteStore) -> None:
    for _ in range(2):  # once read, once found
        (memory,) = store.get_many(["m8"])
        memory.metadata["source"] = "changed by a caller"
        memory.metadata["added"] = True
    (memory,) = store.get_many(["m8"])
    assert memory.metadata == {"source": "test"}


def test_tenants_with_the_same_id_never_see_each_others_kept_rows(path: Path) -> None:
    alice = SQLiteStore(path, Tenancy(tenant="alice"))
    bob = SQLiteStore(path, Tenancy(tenant="bob"))
    alice.insert([_memory("same", "alice's private note")], None)
    bob.insert([_memory("same", "bob's private note")], None)
    for _ in range(3):
        assert _contents(alice, ["same"]) == ["alice's private note"]
        assert _contents(bob, ["same"]) == ["bob's private note"]
    bob.forget(["same"], hard=True, at=NOW)
    assert _contents(bob, ["same"]) == []
    assert _contents(alice, ["same"]) == ["alice's private note"]
    alice.close()
    bob.close()


def test_a_handle_with_shared_namespaces_prefers_its_own_row(path: Path) -> None:
    team = SQLiteStore(path, Tenancy(tenant="team"))
    team.insert([_memory("note", "the team's note")], None)
    team.close()
    alice = SQLiteStore(path, Tenancy(tenant="alice", shared=("team",)))
    assert _contents(alice, ["note"]) == ["the team's note"]
    alice.insert([_memory("note", "alice's own note")], None)
    for _ in range(2):
        assert _contents(alice, ["note"]) == ["alice's own note"]
    alice.close()


def test_the_least_recently_used_rows_go_first_at_capacity(path: Path) -> None:
    kept = kept_rows.KeptRows(capacity=3)
    opened = SQLiteStore(path)
    opened.insert([_memory(f"c{i}", f"row {i}") for i in range(5)], None)
    generation = kept.look(opened._db)
    assert generation is not None
    kept.keep(generation, DEFAULT_TENANT, opened.get_many([f"c{i}" for i in range(5)]))
    assert sorted(kept.take(generation, DEFAULT_TENANT, [f"c{i}" for i in range(5)])) == [
        "c2", "c3", "c4"
    ]  # fmt: skip
    opened.close()


def test_a_read_older_than_a_drop_is_not_kept(store: SQLiteStore, path: Path) -> None:
    """A read whose look came before another connection noticed a commit (its snapshot may
    predate the commit) is not kept: the commit was already noticed, and nothing would
    drop it later."""
    kept = kept_rows.KeptRows()
    reader, noticer = store._db, sqlite3.connect(path)
    kept.look(noticer)
    before = kept.look(reader)
    assert before is not None
    stale = store.get_many(["m9"])
    writer = SQLiteStore(path)
    writer.replace(_memory("m9", "row 9 rewritten"), None)
    writer.close()
    after = kept.look(noticer)  # notices the commit and drops what was kept
    kept.keep(before, DEFAULT_TENANT, stale)  # the read from before the commit arrives late
    assert after is not None
    assert kept.take(after, DEFAULT_TENANT, ["m9"]) == {}
    assert kept.take(before, DEFAULT_TENANT, ["m9"]) == {}
    noticer.close()


def test_threads_of_one_handle_share_what_was_kept(store: SQLiteStore) -> None:
    store.get_many(["m10", "m11"])
    reads: list[list[str]] = []

    def read_on_another_thread() -> None:
        reads.append(_row_reads(store))  # this thread's own connection
        assert _contents(store, ["m10", "m11"]) == ["row 10 about kayaks", "row 11 about kayaks"]
        assert _contents(store, ["m10", "m11"]) == ["row 10 about kayaks", "row 11 about kayaks"]

    worker = threading.Thread(target=read_on_another_thread)
    worker.start()
    worker.join()
    # a connection not seen before drops what was kept (it cannot tell what changed since):
    # its first read reads, its second finds
    assert len(reads[0]) == 1
    reads_here = _row_reads(store)
    assert _contents(store, ["m10", "m11"]) == ["row 10 about kayaks", "row 11 about kayaks"]
    assert reads_here == []
