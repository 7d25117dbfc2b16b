"""How the PostgreSQL store writes many rows: one binary ``COPY`` per insert (through a
session table, so Row-Level Security still checks every row), and ``bulk_load`` building the
vector index once at the end of a large load instead of row by row."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pytest

from recalld.bench.scale_postgres import database_dsn, temporary_database
from recalld.records import Memory, MemoryFilter
from recalld.stores.asks import NearestAsk, WordsAsk
from recalld.stores.base import BulkLoading, CandidateRequest, Tenancy
from recalld.text import content_hash

pytestmark = pytest.mark.postgres

WORDS = ("lisbon bike rides", "porto wine tasting", "running shoes", "the blue guitar",
         "coffee in the morning", "tax forms due", "a cat named Miso",
         "train to Madrid")  # fmt: skip
DIM = 16


def _memories(start: int, count: int) -> tuple[list[Memory], np.ndarray]:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    rng = np.random.default_rng(start)
    out = []
    for i in range(start, start + count):
        text = f"note {i}: {WORDS[i % len(WORDS)]} and {WORDS[(i * 3) % len(WORDS)]}"
        when = at + timedelta(minutes=i)
        out.append(Memory(id=f"m-{i:05d}", content=text, type="turn",
                          content_hash=content_hash(text), created_at=when, updated_at=when,
                          session_id=f"s-{i // 7}", tags=("t",), metadata={"i": i}))  # fmt: skip
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    return out, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _has_index(dsn: str) -> bool:
    import psycopg

    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT to_regclass('memories_embedding') IS NOT NULL").fetchone()
    return bool(found and found[0])


def _answers(store: object, queries: np.ndarray) -> list[object]:
    out = []
    for vector in queries:
        request = CandidateRequest(
            asks={"semantic": NearestAsk(10, vector), "bm25": WordsAsk(10, ("bike", "miso"))}
        )
        found = store.candidates(request)  # type: ignore[attr-defined]
        out.append({k: [(c.memory_id, round(c.score, 9)) for c in v] for k, v in found.items()})
    return out


@pytest.fixture
def second_database(pg_admin_dsn: str) -> Iterator[str]:
    with temporary_database(pg_admin_dsn, "recalld_test") as dsn:
        yield dsn


@contextmanager
def owned_database(admin_dsn: str, role_prefix: str, *, temp_tables: bool) -> Iterator[str]:
    """A new login role (not a superuser) owning a new database with the extensions in place,
    as the docs ask of a user's server: the role's DSN. ``temp_tables`` False revokes its
    right to create temporary tables. Both are dropped on leaving."""
    import psycopg

    role = f"{role_prefix}_{uuid.uuid4().hex[:8]}"
    name = f"recalld_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"CREATE DATABASE {name} OWNER {role}")
        if not temp_tables:
            admin.execute(f"REVOKE TEMPORARY ON DATABASE {name} FROM PUBLIC, {role}")
    try:
        with psycopg.connect(database_dsn(admin_dsn, name), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION vector")
            admin.execute("CREATE EXTENSION pg_trgm")
            admin.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
        parts = urlsplit(admin_dsn)
        yield urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}",
                                        path=f"/{name}"))  # fmt: skip
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_a_bulk_load_builds_the_vector_index_once_with_the_same_results(
    pg_database: str, second_database: str
) -> None:
    """Loaded in bulk or row by row: the same rows, positions, word statistics and search
    answers; the index is absent during the load and present after it."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    batches = [_memories(0, 300), _memories(300, 250)]
    bulk, plain = PostgresStore(pg_database), PostgresStore(second_database)
    try:
        assert isinstance(bulk, BulkLoading)
        with bulk.bulk_load() as deferred:
            assert deferred
            for memories, vectors in batches:
                bulk.insert(memories, vectors)
                assert not _has_index(pg_database)
            # Meanwhile a search scans the vectors exactly, and finds the rows.
            assert _answers(bulk, batches[0][1][:1])[0]["semantic"][0][0] == "m-00000"
        assert _has_index(pg_database)
        for memories, vectors in batches:
            plain.insert(memories, vectors)
        assert _has_index(second_database)
        queries = _memories(900, 12)[1]
        assert _answers(bulk, queries) == _answers(plain, queries)
        every = MemoryFilter(include_forgotten=True)
        a, b = (s.list(every, limit=1000, newest_first=False) for s in (bulk, plain))
        assert [(m.id, m.position, m.session_id, m.metadata) for m in a] == [
            (m.id, m.position, m.session_id, m.metadata) for m in b]  # fmt: skip
        assert [m.position for m in a[:8]] == [0, 1, 2, 3, 4, 5, 6, 0]
        for dsn in (pg_database, second_database):
            with psycopg.connect(dsn) as conn:
                stats = conn.execute("SELECT sum(rows), sum(tokens) FROM lexical_stats")
                rows, tokens = stats.fetchone() or (0, 0)
                truth = conn.execute("SELECT count(*), sum(lex_length) FROM memories").fetchone()
            assert (rows, tokens) == truth and rows == 550
    finally:
        bulk.close()
        plain.close()


def test_a_store_with_vectors_keeps_its_index_and_loads_as_usual(pg_database: str) -> None:
    from recalld.stores.postgres import PostgresStore

    store = PostgresStore(pg_database)
    try:
        store.insert(*_memories(0, 20))
        with store.bulk_load() as deferred:
            assert not deferred
            store.insert(*_memories(20, 20))
            assert _has_index(pg_database)
        assert store.stats().with_vectors == 40
    finally:
        store.close()


def test_an_unfinished_bulk_load_leaves_the_index_to_the_next_insert(pg_database: str) -> None:
    """A load killed before its end (here: the index dropped as if never built) is repaired by
    the next insert of vectors; an insert does not build it while another load runs."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    loader, writer = PostgresStore(pg_database), PostgresStore(pg_database)
    try:
        with loader.bulk_load() as deferred:
            assert deferred
            loader.insert(*_memories(0, 30))
            writer.insert(*_memories(30, 5))  # another handle, during the load
            assert not _has_index(pg_database)
        assert _has_index(pg_database)
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute("DROP INDEX memories_embedding")
        writer.insert(*_memories(35, 5))
        assert _has_index(pg_database)
        assert writer.stats().with_vectors == 40
    finally:
        loader.close()
        writer.close()


def test_duplicates_and_bad_rows_change_nothing(pg_database: str) -> None:
    """The copied batch goes in as one statement: one bad row refuses the whole batch."""
    from recalld.errors import EmbedderMismatchError, StoreError
    from recalld.stores.postgres import PostgresStore

    store = PostgresStore(pg_database)
    try:
        memories, vectors = _memories(0, 10)
        store.insert(memories, vectors)
        again, more = _memories(10, 10)
        with pytest.raises(StoreError):
            store.insert([*again, memories[3]], np.vstack([more, vectors[3:4]]))
        with pytest.raises(EmbedderMismatchError):
            store.insert(again, np.ones((10, DIM + 1), np.float32))
        assert store.stats().memories == 10
        store.insert(again, more)  # the session table was left clean
        assert store.stats().memories == 20
    finally:
        store.close()


def test_an_ordinary_role_loads_under_row_level_security(pg_admin_dsn: str) -> None:
    """Not a superuser, so Row-Level Security binds the role (``COPY FROM`` would be refused
    on ``memories``); it owns its database, as the docs ask, so it may build the index."""
    from recalld.stores.postgres import PostgresStore

    with owned_database(pg_admin_dsn, "recalld_owner", temp_tables=True) as dsn:
        alice = PostgresStore(dsn, Tenancy("alice"))
        bob = PostgresStore(dsn, Tenancy("bob"))
        try:
            with alice.bulk_load() as deferred:
                assert deferred
                alice.insert(*_memories(0, 40))
            bob.insert(*_memories(100, 3))
            assert _has_index(dsn)
            assert (alice.stats().memories, bob.stats().memories) == (40, 3)
            assert not bob.get_many(["m-00001"])
        finally:
            alice.close()
            bob.close()


def test_a_role_without_temporary_tables_still_inserts(pg_admin_dsn: str) -> None:
    """The binary ``COPY`` goes through a temporary table; a role that may not create one
    inserts row by row, with the same result."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    with owned_database(pg_admin_dsn, "recalld_notemp", temp_tables=False) as dsn:
        store = PostgresStore(dsn, Tenancy("alice"))
        try:
            with psycopg.connect(dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("CREATE TEMP TABLE probe (x int)")
            memories, vectors = _memories(0, 30)
            store.insert(memories, vectors)
            listed = store.list(MemoryFilter(), limit=100, newest_first=False)
            assert [(m.id, m.position) for m in listed] == [
                (m.id, i % 7) for i, m in enumerate(memories)]  # fmt: skip
            assert store.stats().with_vectors == 30
        finally:
            store.close()


def test_a_row_of_ordinary_length_keeps_its_words_uncompressed(pg_database: str) -> None:
    """A memory of about 2.6 kB with its 384-d vector is written whole: its words are not
    compressed on the way through the session table (past its 2 kB they were, and every
    search that tests a tenant's rows for its words then decompressed them)."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    at = datetime(2024, 1, 1, tzinfo=UTC)
    text = " ".join(f"word{i % 40} thing{i}" for i in range(60))  # about 700 bytes of words
    memory = Memory(id="long-words", content=text, type="fact", content_hash=content_hash(text),
                    created_at=at, updated_at=at)  # fmt: skip
    store = PostgresStore(pg_database)
    try:
        store.insert([memory], np.random.default_rng(1).standard_normal((1, 384)).astype("f4"))
    finally:
        store.close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_column_compression(lex_tokens), pg_column_size(m.*) FROM memories m"
        ).fetchone()
    assert row is not None
    compression, size = row
    assert size > 2048 and compression is None
