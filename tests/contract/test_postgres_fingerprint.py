"""The embedder fingerprint on PostgreSQL: checked before each search without a statement of
its own (the handle's known value, checked in turn by the search statement and by each
write of vectors), and a value gone stale (another process's reindex) never lets a search
answer or a write store vectors."""

from __future__ import annotations

from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.errors import EmbedderMismatchError
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory

pytestmark = pytest.mark.postgres

OTHER = FakeEmbedder(model_id="another-model").fingerprint.to_json()
"""The fingerprint another process's reindex leaves (same dimension, another model)."""


def _engine(dsn: str) -> recalld.MemoryEngine:
    return recalld.open(
        settings=Settings(db=dsn, cache_dir=None, tenant="t"), embedder=FakeEmbedder()
    )


def _store_fingerprint(dsn: str, value: str) -> None:
    """What a reindex by another process leaves in the store's facts."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE recalld_meta SET value = %s WHERE key = 'embedding_fingerprint'", (value,)
        )


def test_a_search_reads_the_fingerprint_in_no_statement_of_its_own(
    pg_database: str, tmp_path: Path
) -> None:
    """Every frontend message of a search (libpq's trace of each pooled connection): the
    fingerprint is read inside the search statement, not by a lookup of its own before it
    (one of the 6.5 statements a small tenant's search sent)."""
    with _engine(pg_database) as engine:
        engine.add_many([NewMemory(f"note {i} on topic {i % 3}") for i in range(12)])
        first = [h.memory.id for h in engine.search("topic 1", limit=5).hits]
        store = engine.store
        trace = tmp_path / "libpq.trace"
        with trace.open("w") as out:
            pool = [store._pool.getconn() for _ in range(store._pool.get_stats()["pool_size"])]
            for conn in pool:
                conn.pgconn.trace(out.fileno())
                store._pool.putconn(conn)
            try:
                again = [h.memory.id for h in engine.search("topic 1", limit=5).hits]
            finally:
                for conn in pool:
                    conn.pgconn.untrace()
            # The search statement as prepared at its first use (a small tenant's run on
            # generic plans), sent again by name only.
            held = [store._pool.getconn() for _ in range(store._pool.get_stats()["pool_size"])]
            try:
                names = {
                    str(name)
                    for conn in held
                    for (name,) in conn.execute(
                        "SELECT name FROM pg_prepared_statements"
                        " WHERE statement LIKE '%%WITH hits AS%%'"
                    ).fetchall()
                }
            finally:
                for conn in held:
                    store._pool.putconn(conn)
        sent = trace.read_text(encoding="utf-8")  # a statement's text spans lines
    ran = "WITH hits AS" in sent or any(f'"{name}"' in sent for name in names)
    assert again == first and ran  # the search went through a traced connection
    assert "recalld_meta WHERE key = $1" not in sent


def test_a_fingerprint_changed_by_another_process_stops_searches_and_writes(
    pg_database: str,
) -> None:
    """After another process's reindex, the handle's known value is stale: the next search
    statement sees the new one and refuses (nothing returned); the search after it reads
    the store's value and refuses as any mismatch does; a write of vectors checks it in
    its transaction and writes nothing. Put back, searches answer as before."""
    with _engine(pg_database) as engine, _engine(pg_database) as writer:
        engine.add_many([NewMemory(f"note {i} on topic {i % 3}") for i in range(12)])
        before = [h.memory.id for h in engine.search("topic 1", limit=5).hits]
        writer.search("topic 2", limit=5)  # this handle knows the fingerprint too
        stored = engine.store.get_fingerprint()
        assert stored is not None
        _store_fingerprint(pg_database, OTHER)
        with pytest.raises(EmbedderMismatchError, match="changed while this handle was open"):
            engine.search("topic 1", limit=5)
        with pytest.raises(EmbedderMismatchError, match="another-model"):
            engine.search("topic 1", limit=5)
        with pytest.raises(EmbedderMismatchError):
            writer.add("written with the old embedder")
        assert engine.status().store.memories == 12
        _store_fingerprint(pg_database, stored)
        assert [h.memory.id for h in engine.search("topic 1", limit=5).hits] == before
        writer.add("written once the fingerprint is back")
        assert engine.status().store.memories == 13
