"""What only the PostgreSQL backend has: Row-Level Security as the second tenant wall,
its migrations, and search parity with the SQLite store on the same memories."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder, FakeEmbedder
from recalld.records import Memory, MemoryFilter, NewMemory, TimeRange
from recalld.retrieval.channels import Need, request as channel_request
from recalld.retrieval.query import understand
from recalld.stores.asks import EntitiesAsk, NearestAsk, RecentAsk, WordsAsk
from recalld.stores.base import CandidateRequest, Tenancy
from recalld.text import content_hash

from ..retrieval.golden import load_corpus

pytestmark = pytest.mark.postgres


@contextmanager
def probe_role(dsn: str, grant: str) -> Iterator[Any]:
    """A connection acting as an ordinary role (``recalld_probe``, granted ``grant``), which
    Row-Level Security binds; the role is dropped afterwards."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS recalld_probe")
        conn.execute("CREATE ROLE recalld_probe")
        conn.execute(f"GRANT {grant} TO recalld_probe")
        conn.execute("SET ROLE recalld_probe")
        try:
            yield conn
        finally:
            conn.execute("RESET ROLE")
            conn.execute("DROP OWNED BY recalld_probe")
            conn.execute("DROP ROLE recalld_probe")


def test_row_level_security_is_a_second_wall(pg_database: str, pg_admin_dsn: str) -> None:
    with recalld.open(settings=Settings(db=pg_database, cache_dir=None, tenant="alice"),
                      embedder="fake") as alice:  # fmt: skip
        alice.add("alice's secret")
    with probe_role(pg_database, "SELECT, UPDATE, DELETE ON memories") as conn:

        def visible(namespaces: str | None) -> int:
            if namespaces is not None:
                conn.execute("SELECT set_config('recalld.namespaces', %s, false)", (namespaces,))
            found = conn.execute("SELECT count(*) FROM memories").fetchone()
            return int(found[0]) if found else -1

        assert visible(None) == 0  # no namespace declared: no row
        assert visible("bob") == 0
        # Even a query without the store's WHERE clause changes nothing of Alice's.
        assert conn.execute("DELETE FROM memories").rowcount == 0
        assert visible("bob,team") == 0
        assert visible("alice") == 1


def test_migrations_from_empty_and_from_the_previous_version(pg_database: str) -> None:
    import psycopg

    from recalld.stores.postgres import PostgresStore
    from recalld.stores.postgres.schema import MIGRATIONS, migrate

    with psycopg.connect(pg_database, autocommit=True) as conn:
        # From version 3: migration 4 (FTS5's tokens of existing rows) and later apply.
        assert migrate(conn, upto=3) == [m[1] for m in MIGRATIONS[:3]]
        conn.execute(
            "INSERT INTO memories (namespace, id, content, type, content_hash, created_at,"
            " updated_at, ref_time) VALUES ('default', 'old', 'kept across', 'event', 'h', 0,"
            " 0, 0)"
        )
    store = PostgresStore(pg_database)  # applies the rest
    try:
        assert store.stats().schema_version == MIGRATIONS[-1][0]
        assert [m.content for m in store.get_many(["old"])] == ["kept across"]
        assert store.source_roots() == []
        # Migration 4 tokenized the old row as FTS5 does and counted it in the statistics.
        found = store.candidates(CandidateRequest(asks={"bm25": WordsAsk(5, ("across",))}))
        assert [c.memory_id for c in found["bm25"]] == ["old"]
    finally:
        store.close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        assert migrate(conn) == []  # nothing left to do, and running again is harmless
        names = [r[0] for r in conn.execute("SELECT name FROM recalld_migrations ORDER BY id")]
        assert conn.execute("SELECT lex_tokens, lex_length FROM memories").fetchall() == [
            (["kept", "across"], 2)]  # fmt: skip
        assert conn.execute("SELECT sum(rows), sum(tokens) FROM lexical_stats").fetchone() == (
            1, 2)  # fmt: skip
    assert names == [m[1] for m in MIGRATIONS]


def test_a_vector_stays_in_its_row_when_the_text_is_long(pg_database: str) -> None:
    """Migration 8: a row past 2 kB moves its text to TOAST, not its vector, so reading a
    vector is one buffer, not a TOAST lookup; the vector reads back exactly."""
    import numpy as np
    import psycopg

    from recalld.stores.postgres import PostgresStore

    store = PostgresStore(pg_database)
    try:
        vectors = np.random.default_rng(3).standard_normal((8, 384)).astype(np.float32)
        words = [f"word{i}x{j}" for i in range(8) for j in range(400)]
        now = datetime(2026, 1, 1, tzinfo=UTC)
        texts = [" ".join(words[i * 400 : (i + 1) * 400]) for i in range(8)]
        memories = [Memory(id=f"v{i}", content=text, type="fact", created_at=now,
                           updated_at=now, content_hash=content_hash(text))
                    for i, text in enumerate(texts)]  # fmt: skip
        short = Memory(
            id="short",
            content=" ".join(words[:60]),
            type="fact",
            created_at=now,
            updated_at=now,
            content_hash=content_hash(" ".join(words[:60])),
        )
        store.insert([*memories, short], np.vstack([vectors, vectors[:1]]))
        got = store.vectors_for([f"v{i}" for i in range(8)])
        assert all(np.array_equal(got[f"v{i}"], vectors[i]) for i in range(8))
    finally:
        store.close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        storage = conn.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid ="
            " 'memories'::regclass AND attname = 'embedding'"
        ).fetchone()
        assert storage == ("m",)  # kept when the first vector set the column's dimension
        # Not one vector has a TOAST chunk (PostgreSQL 17+ says which values have one).
        toasted = conn.execute(
            "SELECT count(pg_column_toast_chunk_id(embedding)), count(embedding) FROM memories"
        ).fetchone()
        assert toasted == (0, 9)
        # A row of ordinary length (2.5 kB with its vector) keeps its words in the row too.
        words_out = conn.execute(
            "SELECT pg_column_toast_chunk_id(lex_tokens) IS NULL,"
            " pg_column_size(m.*) FROM memories m WHERE id = 'short'"
        )
        inline, size = words_out.fetchone()  # type: ignore[misc]
        assert inline and size > 2048


def test_every_unique_key_of_a_tenants_rows_holds_the_namespace(pg_database: str) -> None:
    """What a cluster that spreads tenants over servers by namespace (Citus) requires of a
    distributed table: the namespace in its primary key and in every unique index."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    PostgresStore(pg_database).close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        keys = conn.execute(
            "SELECT c.relname, i.indexrelid::regclass::text, array_agg(a.attname::text)"
            " FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indisunique AND c.relname IN"
            " ('memories', 'lexical_stats', 'source_roots', 'source_files')"
            " GROUP BY 1, 2"
        ).fetchall()
    assert {table for table, _, _ in keys} == {
        "memories", "lexical_stats", "source_roots", "source_files"}  # fmt: skip
    assert [(t, index) for t, index, columns in keys if "namespace" not in columns] == []


def test_a_foreign_memories_table_is_refused(pg_database: str) -> None:
    import psycopg

    from recalld.stores.postgres import PostgresStore

    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE memories (x int)")
    with pytest.raises(recalld.StoreError, match="another program"):
        PostgresStore(pg_database)


def plan_terms(query: str) -> tuple[str, ...]:
    return understand(query, "hybrid", datetime(2025, 6, 1, tzinfo=UTC)).terms


def test_same_search_same_results_on_both_backends(
    pg_database: str, tmp_path: Path, local_embedder: Embedder
) -> None:
    """The same memories (same insertion order) give the same candidates per channel
    (FTS5's BM25 included: PostgreSQL computes it over the same tokens) and the same
    hybrid (the default) and vector results on SQLite and PostgreSQL, scores within float
    tolerance."""
    engines = [
        recalld.open(settings=Settings(db=location, cache_dir=None), embedder=local_embedder)
        for location in (tmp_path / "m.db", pg_database)
    ]
    try:
        queries, as_of = load_corpus(engines[0])
        load_corpus(engines[1])
        lexical = 0
        window = TimeRange(datetime(2023, 5, 5, tzinfo=UTC), datetime(2025, 6, 1, tzinfo=UTC))
        for query in queries:
            vector = local_embedder.embed_query(query)
            request = CandidateRequest(
                asks={
                    "semantic": NearestAsk(40, vector),
                    "window_semantic": NearestAsk(40, vector, window=window),
                    "bm25": WordsAsk(40, plan_terms(query)),
                    **channel_request(Need({"bm25": 40}, (), query)).asks,
                    "entity": EntitiesAsk(40, ("ana", "lisbon", "porto")),
                    "temporal": RecentAsk(40, window=window),
                }
            )
            sqlite, postgres = (e.store.candidates(request) for e in engines)
            assert sqlite.keys() == postgres.keys()
            for channel in sqlite:
                assert [c.memory_id for c in sqlite[channel]] == [
                    c.memory_id for c in postgres[channel]], (query, channel)  # fmt: skip
                if channel != "trigram":  # CJK: FTS5's trigram BM25 vs a count of grams
                    assert [c.score for c in sqlite[channel]] == pytest.approx(
                        [c.score for c in postgres[channel]], abs=1e-6)  # fmt: skip
            lexical += len(sqlite.get("bm25", []))
            for mode, granularity in (("vector", "memory"), ("vector", "session"),
                                      ("hybrid", "memory"), ("hybrid", "session")):  # fmt: skip
                a, b = (e.search(query, limit=10, as_of=as_of, mode=mode,  # type: ignore[arg-type]
                                 granularity=granularity).hits for e in engines)  # type: ignore[arg-type]  # fmt: skip
                assert [h.memory.id for h in a] == [h.memory.id for h in b], (query, mode)
                assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)
        assert lexical > 20  # the word channel was compared, not only empty lists
    finally:
        for engine in engines:
            engine.close()


def test_another_tenants_words_change_neither_hits_nor_scores(
    pg_database: str, local_embedder: Embedder
) -> None:
    """On PostgreSQL the word statistics are those of the namespaces a search may see:
    another tenant's memories, full of the query's words, change no hit and no score of
    this tenant's word channel (its rows are not even read: the index is led by the
    namespace)."""
    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=local_embedder) as engine:  # fmt: skip
        queries, _ = load_corpus(engine)
        requests = [channel_request(Need({"bm25": 40}, plan_terms(q), q))
                    for q in queries]  # fmt: skip
        before = [engine.store.candidates(r).get("bm25", []) for r in requests]
        with recalld.open(settings=Settings(db=pg_database, cache_dir=None, tenant="other"),
                          embedder=local_embedder) as other:  # fmt: skip
            other.add_many([NewMemory(f"{q} {q} Ana cycled to Lisbon and Porto") for q in queries])
        after = [engine.store.candidates(r).get("bm25", []) for r in requests]
    assert sum(len(found) for found in before) > 20
    assert after == before


def test_tenancy_reaches_the_pool(pg_database: str) -> None:
    from recalld.stores.postgres import PostgresStore

    store = PostgresStore(pg_database, Tenancy("alice", ("team",)))
    try:
        assert store.tenancy.visible == ("alice", "team")
        assert store.stats().memories == 0
    finally:
        store.close()


def test_postgres_start_and_stop_commands(tmp_path: Path) -> None:
    import psycopg
    from click.testing import CliRunner

    from recalld.interfaces.cli import cli

    folder = tmp_path / "pg"
    started = CliRunner().invoke(cli, ["postgres", "start", "--dir", str(folder)])
    try:
        assert started.exit_code == 0, started.output
        dsn = started.stdout.strip().splitlines()[-1]
        assert dsn.startswith("postgresql://recalld_app:")
        admin = started.stderr.split("superuser DSN", 1)[1].split("): ", 1)[1].split()[0]
        assert admin.startswith("postgresql://postgres:") and "row-level security" in (
            started.stderr)  # fmt: skip
        with psycopg.connect(dsn) as conn:  # the application's role: no superuser, no bypass
            found = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles"
                                 " WHERE rolname = current_user").fetchone()  # fmt: skip
            assert found == (False, False)
        with recalld.open(dsn, tenant="alice", embedder=FakeEmbedder(), cache_dir=None) as alice:
            alice.add("alice's private note")  # the role creates the schema and writes
        with psycopg.connect(dsn) as conn:  # the wall binds the owner: no tenant, no rows
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)
        with psycopg.connect(admin) as conn:  # the superuser passes through it
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (1,)
        with psycopg.connect(admin, autocommit=True) as conn:  # as an earlier version left it
            conn.execute("ALTER TABLE memories OWNER TO postgres")
        again = CliRunner().invoke(cli, ["postgres", "start", "--dir", str(folder)])
        assert again.stdout.strip().splitlines()[-1] == dsn  # a running server is reused
        with recalld.open(dsn, tenant="alice", embedder=FakeEmbedder(), cache_dir=None) as alice:
            alice.add("written after the tables were handed back to the application role")
            assert alice.status().store.memories == 2
    finally:
        stopped = CliRunner().invoke(cli, ["postgres", "stop", "--dir", str(folder)])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert "no server" in CliRunner().invoke(cli, ["postgres", "stop", "--dir",
                                                   str(folder)]).output  # fmt: skip


def test_a_large_tenant_reads_its_word_channels_beside_its_vectors(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PARALLEL_READS_MIN_ROWS memories seen, a search reads the word channels in a
    statement of their own on a second connection while the query is embedded and the
    vectors are searched; the answers are those of the one statement."""
    from recalld.stores.postgres import PostgresStore, searching as postgres_searching

    model = FakeEmbedder()
    settings = Settings(db=pg_database, cache_dir=None, tenant="big")
    with recalld.open(settings=settings, embedder=model) as engine:
        engine.add_many([NewMemory(f"note {i} about the garden, topic {i % 7}") for i in range(60)])
        queries = ["garden topic 3", "note 12", "what about topic 5?"]
        one = [[h.memory.id for h in engine.search(q, limit=5).hits] for q in queries]
        assert not engine.store.parallel_reads()
    monkeypatch.setattr(postgres_searching, "PARALLEL_READS_MIN_ROWS", 50)
    statements: list[str] = []
    with recalld.open(settings=settings, embedder=model) as engine:
        assert isinstance(engine.store, PostgresStore) and engine.store.parallel_reads()
        reading = engine.store.search_rows

        def counted(requests: list[CandidateRequest], **flags: object) -> object:
            statements.append("+".join(sorted(n for r in requests for n in ("semantic", "bm25")
                                              if n in r.asks)))  # fmt: skip
            return reading(requests, **flags)  # type: ignore[arg-type]

        monkeypatch.setattr(engine.store, "search_rows", counted)
        beside = [[h.memory.id for h in engine.search(q, limit=5).hits] for q in queries]
    assert beside == one
    assert "semantic" in statements and "bm25" in statements  # two statements, not one


def test_word_postings_answer_the_word_channel_and_follow_every_write(
    pg_database: str, tmp_path: Path, local_embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recalld postgres word-index`: the tenant's word postings. The word channel's rows
    and BM25 scores are those of scoring every matching row on the table, whatever the
    list's length and the rows read from the table first. Inserts, edits and hard deletes
    keep the postings in step in the writing transaction; other tenants see none of them;
    --drop removes them."""
    import psycopg
    from click.testing import CliRunner

    from recalld.interfaces.cli import cli
    from recalld.stores.postgres import (
        PostgresStore,
        indexes as postgres_indexes,
        word_sql as postgres_word_sql,
    )

    # Loaded past the size before it was set (no write builds them: words_due), so that
    # status advises the command and the command builds them.
    monkeypatch.setattr(postgres_indexes, "WORD_POSTINGS_ADVISED_ROWS", 10**6)
    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=local_embedder) as engine:  # fmt: skip
        queries, _ = load_corpus(engine)
    monkeypatch.setattr(postgres_indexes, "WORD_POSTINGS_ADVISED_ROWS", 20)  # status advises it
    queries = [*queries, "what's Ana's plan?", "e-mail from Porto"]  # phrases of two tokens
    requests = [channel_request(Need({"bm25": 40}, plan_terms(q), q))
                for q in queries]  # fmt: skip

    def words(store: PostgresStore) -> list[list[tuple[str, float]]]:
        return [[(c.memory_id, c.score) for c in store.candidates(r).get("bm25", [])]
                for r in requests]  # fmt: skip

    def postings_match_rows() -> bool:
        """Every live row's distinct tokens, and nothing else, are posted."""
        with psycopg.connect(pg_database) as conn:
            conn.execute("SELECT set_config('recalld.namespaces', 'default', false)")
            posted = conn.execute("SELECT pk, token, tf FROM word_postings ORDER BY 1, 2")
            rows = conn.execute(
                "SELECT m.pk, t.token, count(*) FROM memories m, unnest(m.lex_tokens) t(token)"
                " GROUP BY 1, 2 ORDER BY 1, 2").fetchall()  # fmt: skip
            return posted.fetchall() == rows and len(rows) > 100

    store = PostgresStore(pg_database)
    exact = words(store)
    small = [channel_request(Need({"bm25": 2}, plan_terms(q), q)) for q in queries]
    exact_small = [store.candidates(r).get("bm25", []) for r in small]
    assert not store._word_postings and "word-index" in store.stats().advice[-1]
    store.close()
    built = CliRunner().invoke(cli, ["--db", pg_database, "postgres", "word-index"])
    assert built.exit_code == 0, built.output
    assert "word postings" in built.output and postings_match_rows()
    store = PostgresStore(pg_database)
    assert store._word_postings and store.stats().advice == ()
    sql, _ = store._candidates_sql(requests[0])
    assert "word_postings" in sql and "recalld_lex_rows(" not in sql
    assert words(store) == exact and sum(len(w) for w in exact) > 20

    # However many rows are read from the table first, the list is the same.
    assert [store.candidates(r).get("bm25", []) for r in small] == exact_small
    for factor in (0, 1):  # none: every row is then read, since nothing proves the list
        monkeypatch.setattr(postgres_word_sql, "WORD_READ_FACTOR", factor)
        assert words(store) == exact
        assert [store.candidates(r).get("bm25", []) for r in small] == exact_small
    monkeypatch.undo()

    # Under a filter narrower than the live rows, the postings' rows that pass it, the same
    # list as every matching row's.
    narrow = channel_request(
        Need({"bm25": 40}, plan_terms(queries[0]), queries[0]), MemoryFilter(session_id="s1")
    )
    assert "lex_walk" in store._candidates_sql(narrow)[0]
    filtered = store.candidates(narrow).get("bm25", [])
    store._word_postings = False
    assert store.candidates(narrow).get("bm25", []) == filtered
    store.close()

    # Writes after the build: postings follow them, scores stay those of every row.
    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=local_embedder) as engine:  # fmt: skip
        added = engine.add("Ana's zephyrine kayak trip from Lisbon to Porto")
        engine.update(added.id, content="Ana's kayak trip from Porto, zephyrine")
        gone = engine.add("a zephyrine note to delete")
        engine.forget([gone.id], hard=True)
        engine.forget([added.id])  # forgotten rows keep their postings, as FTS5 keeps them
    assert postings_match_rows()
    request = CandidateRequest(asks={"bm25": WordsAsk(40, plan_terms("zephyrine kayak Porto"))})
    with_postings = PostgresStore(pg_database)
    answer = with_postings.candidates(request)["bm25"]
    with_postings._word_postings = False
    assert answer == with_postings.candidates(request)["bm25"] and answer
    with_postings.close()

    # A handle opened before a --drop asks again without them: the same answer.
    before_drop = PostgresStore(pg_database)
    assert before_drop._word_postings
    dropped_early = CliRunner().invoke(cli, ["--db", pg_database, "postgres", "word-index",
                                             "--drop"])  # fmt: skip
    assert dropped_early.exit_code == 0, dropped_early.output
    after_drop = PostgresStore(pg_database)  # scores every matching row
    assert words(before_drop) == words(after_drop) and not before_drop._word_postings
    before_drop.close()
    after_drop.close()
    rebuilt = CliRunner().invoke(cli, ["--db", pg_database, "postgres", "word-index"])
    assert rebuilt.exit_code == 0 and postings_match_rows()

    # Another tenant sees no postings; SQLite has no such command; --drop removes them.
    other = PostgresStore(pg_database, Tenancy("other"))
    assert not other._word_postings
    other.close()
    with probe_role(pg_database, "SELECT ON word_postings, word_namespaces") as conn:
        for namespaces, seen in (("other", False), ("default", True)):
            conn.execute("SELECT set_config('recalld.namespaces', %s, false)", (namespaces,))
            for table in ("word_postings", "word_namespaces"):
                found = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                assert found is not None and (found[0] > 0) == seen, (namespaces, table)
    dropped = CliRunner().invoke(cli, ["--db", pg_database, "postgres", "word-index", "--drop"])
    assert dropped.exit_code == 0 and "dropped" in dropped.output
    store = PostgresStore(pg_database)
    assert not store._word_postings
    with store._conn() as conn:
        assert conn.execute("SELECT count(*) FROM word_postings").fetchone() == (0,)
    store.close()
    with recalld.open(settings=Settings(db=tmp_path / "m.db", cache_dir=None),
                      embedder=local_embedder) as engine:  # fmt: skip
        engine.add("a memory in SQLite")
    sqlite = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "postgres", "word-index"])
    assert sqlite.exit_code != 0 and "needs a PostgreSQL store" in sqlite.output
