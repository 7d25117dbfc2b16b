"""The PostgreSQL store's HNSW candidates: a tenant's own index (`recalld postgres
tenant-index`), built with a wide beam and searched with the candidates its graph needs
(fewer than an index of the same rows built with pgvector's default beam); more candidates
for a tenant holding a small share of the table's index; fewer for a search from a stored
vector, set in that search's own round trip."""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.errors import EmbedderMismatchError
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory
from recalld.stores.asks import NearestAsk
from recalld.stores.base import CandidateRequest, Tenancy

from .tenants import small_and_large

pytestmark = pytest.mark.postgres


def test_the_candidates_follow_the_beam_the_graph_was_built_with() -> None:
    """The 100k tenant of the 1M database: 400 candidates for an index built at 64 (or the
    table's), 250 for its own built at OWN_INDEX_EF_CONSTRUCTION (0.993-0.995 of the exact
    10 nearest against 0.997 at 400; the vector search 3.4 ms against 5.5)."""
    from recalld.stores.postgres.indexes import (
        EF_SEARCH,
        OWN_INDEX_EF_CONSTRUCTION,
        PGVECTOR_EF_CONSTRUCTION,
        ef_search,
    )

    wide = OWN_INDEX_EF_CONSTRUCTION
    assert ef_search(100_000, 10**6, own_index=True, beam=wide) == 250
    assert ef_search(100_000, 10**6, own_index=True, beam=PGVECTOR_EF_CONSTRUCTION) == 400
    assert ef_search(100_000, 10**6, own_index=True) == 400  # the beam unknown: as at 64
    assert ef_search(100_000, 100_000, beam=wide) == 400  # the table's index: never narrowed
    assert ef_search(30_000, 10**6, own_index=True, beam=wide) == EF_SEARCH


def test_a_handle_reads_its_own_indexs_beam(pg_database: str) -> None:
    """The handle reads the beam of its tenant's own index from the index's options when it
    opens: OWN_INDEX_EF_CONSTRUCTION from `recalld postgres tenant-index`, pgvector's
    default for an index stating none (as one built before the wider beam), 0 without
    one; another tenant never sees it."""
    import psycopg

    from recalld.stores.postgres import PostgresStore
    from recalld.stores.postgres.indexes import (
        OWN_INDEX_EF_CONSTRUCTION,
        PGVECTOR_EF_CONSTRUCTION,
        Indexes,
        own_index_name,
    )

    for tenant in ("big", "other"):
        with recalld.open(settings=Settings(db=pg_database, cache_dir=None, tenant=tenant),
                          embedder=FakeEmbedder()) as engine:  # fmt: skip
            engine.add_many([NewMemory(f"{tenant} note {i}") for i in range(30)])

    def beams() -> tuple[int, int]:
        found = []
        for tenant in ("big", "other"):
            store = PostgresStore(pg_database, Tenancy(tenant))
            with store._read() as conn:
                assert Indexes.read(conn, [tenant]).own_beam == store._own_beam
            found.append(store._own_beam)
            assert store._own_index == (store._own_beam > 0)
            store.close()
        return found[0], found[1]

    assert beams() == (0, 0)
    store = PostgresStore(pg_database, Tenancy("big"))
    store.build_index("vectors")
    store.close()
    assert beams() == (OWN_INDEX_EF_CONSTRUCTION, 0)
    name = own_index_name("big")
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {name}")
        conn.execute(
            f"CREATE INDEX {name} ON memories USING hnsw (embedding vector_cosine_ops)"
            " WHERE namespace = 'big'"
        )
    assert beams() == (PGVECTOR_EF_CONSTRUCTION, 0)


def test_a_tenant_with_an_index_of_its_own_searches_it(
    pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recalld postgres tenant-index`: a partial HNSW index of the tenant's rows. Handles
    opened afterwards state the namespace as a literal, so the planner may use the index
    in any plan, and examine the candidates its own rows call for (not more for a small
    share of the table's index); answers stay the same. Another tenant,
    and the same tenant seen with a shared namespace, never use it."""
    import psycopg
    from click.testing import CliRunner

    from recalld.interfaces.cli import cli
    from recalld.stores.postgres import PostgresStore, indexes as postgres_indexes
    from recalld.stores.postgres.indexes import (
        EF_SEARCH,
        OWN_INDEX_EF_CONSTRUCTION,
        own_index_name,
    )

    monkeypatch.setattr(postgres_indexes, "OWN_INDEX_ADVISED_ROWS", 50)  # status advises it

    model = FakeEmbedder()
    for tenant in ("big", "other"):
        with recalld.open(settings=Settings(db=pg_database, cache_dir=None, tenant=tenant),
                          embedder=model) as engine:  # fmt: skip
            engine.add_many([NewMemory(f"{tenant} note {i} on topic {i % 7}") for i in range(60)])
    queries = [model.embed_query(f"topic {i}") for i in range(4)]

    def nearest(store: PostgresStore) -> list[list[str]]:
        return [
            [
                c.memory_id
                for c in store.candidates(CandidateRequest(asks={"semantic": NearestAsk(5, v)}))[
                    "semantic"
                ]
            ]
            for v in queries
        ]

    def plan(store: PostgresStore) -> str:
        """The plan a cached statement of the handle's vector search gets: made without
        the parameters' values, a top-N sort made dear (an ordered index scan wins)."""
        sql, values = store._candidates_sql(
            CandidateRequest(asks={"semantic": NearestAsk(5, queries[0])})
        )
        names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
        text = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql)
        with store._conn() as conn:
            conn.execute("SET enable_seqscan = off; SET enable_sort = off;"
                         " SET plan_cache_mode = force_generic_plan")  # fmt: skip
            conn.execute(f"PREPARE probe AS {text}")
            found = conn.execute("EXPLAIN EXECUTE probe(" + ", ".join(["NULL"] * len(names))
                                 + ")").fetchall()  # fmt: skip
            conn.execute("DEALLOCATE probe; RESET enable_seqscan; RESET enable_sort;"
                         " RESET plan_cache_mode")  # fmt: skip
        return "\n".join(r[0] for r in found)

    store = PostgresStore(pg_database, Tenancy("big"))
    before = nearest(store)
    assert not store._own_index and own_index_name("big") not in plan(store)
    assert store.stats().vector_index == "table" and "tenant-index" in store.stats().advice[0]
    store.close()
    status = CliRunner().invoke(cli, ["--db", pg_database, "--tenant", "big", "status"])
    assert "tenant-index" in status.output and "shared" in status.output
    built = CliRunner().invoke(cli, ["--db", pg_database, "--tenant", "big", "postgres",
                                     "tenant-index"])  # fmt: skip
    assert built.exit_code == 0, built.output
    assert f"built {own_index_name('big')}" in built.output
    with psycopg.connect(pg_database) as conn:
        (definition,) = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s",
                                     (own_index_name("big"),)).fetchone() or ("",)  # fmt: skip
    assert "hnsw" in definition and "namespace = 'big'::text" in definition
    assert f"ef_construction='{OWN_INDEX_EF_CONSTRUCTION}'" in definition
    store = PostgresStore(pg_database, Tenancy("big"))
    assert store._own_index and own_index_name("big") in plan(store)
    assert store.stats().vector_index == "own" and store.stats().advice == ()
    assert nearest(store) == before
    with store._conn() as conn:
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == (str(EF_SEARCH),)
    store.close()
    for tenancy in (Tenancy("other"), Tenancy("big", shared=("team",))):
        other = PostgresStore(pg_database, tenancy)
        assert not other._own_index and own_index_name("big") not in plan(other)
        other.close()
    dropped = CliRunner().invoke(cli, ["--db", pg_database, "--tenant", "big", "postgres",
                                       "tenant-index", "--drop"])  # fmt: skip
    assert dropped.exit_code == 0 and "dropped" in dropped.output
    store = PostgresStore(pg_database, Tenancy("big"))
    assert not store._own_index and nearest(store) == before
    store.close()
    with recalld.open(settings=Settings(db=tmp_path / "m.db", cache_dir=None),
                      embedder=model) as engine:  # fmt: skip
        engine.add("a memory in SQLite")
    sqlite = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "postgres",
                                      "tenant-index"])  # fmt: skip
    assert sqlite.exit_code != 0 and "needs a PostgreSQL store" in sqlite.output


def test_a_tenant_with_a_small_share_examines_more_hnsw_candidates(pg_database: str) -> None:
    """Under the tenant filter the graph search passes over other tenants' nodes: a tenant
    holding a share s of the table examines EF_SEARCH / s candidates (at most
    EF_SEARCH_MAX), set on each connection its store handle makes."""
    from recalld.stores.postgres import PostgresStore
    from recalld.stores.postgres.indexes import (
        EF_REFERENCE_ROWS,
        EF_SEARCH,
        EF_SEARCH_MAX,
        ef_search,
    )

    assert ef_search(100, 100) == EF_SEARCH and ef_search(0, 100) == EF_SEARCH
    assert ef_search(50, 100) == 2 * EF_SEARCH and ef_search(1, 10**6) == EF_SEARCH_MAX
    # A larger index, searched whole or as a tenant's own, examines more in proportion.
    assert ef_search(4 * EF_REFERENCE_ROWS, 4 * EF_REFERENCE_ROWS) == 4 * EF_SEARCH
    assert ef_search(4 * EF_REFERENCE_ROWS, 10**6, own_index=True) == 4 * EF_SEARCH
    for tenant, count in (("small", 1), ("large", 9)):
        with recalld.open(settings=Settings(db=pg_database, cache_dir=None, tenant=tenant),
                          embedder=FakeEmbedder()) as engine:  # fmt: skip
            engine.add_many([NewMemory(f"{tenant} memory {i}") for i in range(count)])
    for tenant, expected in (("small", EF_SEARCH_MAX), ("large", 112)):
        store = PostgresStore(pg_database, Tenancy(tenant))
        try:
            with store._conn() as conn:
                found = conn.execute("SHOW hnsw.ef_search").fetchone()
            assert found is not None and int(found[0]) == expected, tenant
        finally:
            store.close()


def test_a_search_from_a_stored_vector_examines_fewer_hnsw_candidates(pg_database: str) -> None:
    """The knowledge-update follow search (``near_memory``: from a stored memory's own
    vector) runs with NEAR_MEMORY_EF_SEARCH candidates on its connection, then the handle's
    number again; any other request in the same statement keeps the handle's. Same
    answers."""
    from recalld.stores.postgres import PostgresStore
    from recalld.stores.postgres.indexes import NEAR_MEMORY_EF_SEARCH, near_memory

    model = FakeEmbedder()
    small_and_large(pg_database, model, [f"other {i}" for i in range(400)])
    store = PostgresStore(pg_database, Tenancy("small"))  # a tenth of the table: ef 1,000
    try:
        vector = model.embed_query("memory 3 on topic 3")
        near = CandidateRequest(asks={"semantic": NearestAsk(5, vector, near_memory=True)})
        plain = CandidateRequest(asks={"semantic": NearestAsk(5, vector)})

        def ef(conn: object) -> str:
            found = conn.execute("SHOW hnsw.ef_search").fetchone()  # type: ignore[attr-defined]
            return str(found[0]) if found else ""

        with store._read() as conn:
            handle = ef(conn)  # the connection's, as configured when the pool made it
            assert int(handle) > NEAR_MEMORY_EF_SEARCH and handle == str(store._ef)
            with near_memory(conn, [near], store._ef):
                assert ef(conn) == str(NEAR_MEMORY_EF_SEARCH)
            assert ef(conn) == handle
            with near_memory(conn, [near, plain], store._ef):
                assert ef(conn) == handle
        assert (store.search_rows([near]).channels[0]["semantic"]
                == store.search_rows([plain]).channels[0]["semantic"])  # fmt: skip
    finally:
        store.close()


def test_a_follow_search_sets_its_hnsw_candidates_in_its_own_round_trip(
    pg_database: str, tmp_path: Path
) -> None:
    """A search from a stored vector sends the setting of fewer HNSW candidates, the search
    and the handle's setting again in one round trip (one Sync in libpq's trace, three
    before); after a failed one, the next search has the handle's candidates and works
    (the failed pipeline skipped the reset)."""
    from recalld.stores.postgres import PostgresStore

    model = FakeEmbedder()
    small_and_large(pg_database, model, [f"other {i}" for i in range(400)])
    store = PostgresStore(pg_database, Tenancy("small"))  # ef 1,000: narrowed when following
    vector = model.embed_query("memory 3 on topic 3")
    near = CandidateRequest(asks={"semantic": NearestAsk(5, vector, near_memory=True)})
    trace = tmp_path / "libpq.trace"
    try:
        expected = store.search_rows([near]).channels  # the pool's one connection, made
        with trace.open("w") as out, ExitStack() as held:
            size = store._pool.get_stats()["pool_size"]
            pool = [held.enter_context(store._pool.connection()) for _ in range(size)]
            for conn in pool:  # every connection: the next search is given one of them
                conn.pgconn.trace(out.fileno())
            held.close()
            try:
                assert store.search_rows([near]).channels == expected
            finally:
                for conn in pool:
                    conn.pgconn.untrace()
        sent = [line for line in trace.read_text(encoding="utf-8").splitlines()
                if "\tF\t" in line]  # fmt: skip
        assert any("Bind" in line for line in sent)  # the search went through it
        # Round trips that run statements, each ended by a Sync. A connection the handle's
        # plan choice had not reached yet (the pool grew while the first search waited for
        # its first connection) gets its own first (a small tenant's generic plans,
        # :mod:`.plans`), and its pipeline ends with a Sync that runs nothing.
        trips, trip = [], []
        for line in sent:
            trip.append(line)
            if "\tSync" in line:
                trips.append(trip)
                trip = []
        trips = [t for t in trips if any("\tExecute" in line for line in t)]
        following = [t for t in trips if any("hnsw.ef_search" in line for line in t)]
        assert len(following) == 1  # the setting, the search and the reset: one round trip
        assert sum("\tExecute" in line for line in following[0]) == 3
        others = [t for t in trips if t is not following[0]]
        assert all("plan_cache_mode" in " ".join(t) for t in others), others
        wrong = CandidateRequest(asks={"semantic": NearestAsk(5, vector[:7], near_memory=True)})
        for _ in range(6):  # past psycopg's threshold for preparing a statement
            with pytest.raises(EmbedderMismatchError):
                store.search_rows([wrong])
            assert store.search_rows([near]).channels == expected
        with store._read() as conn:
            found = conn.execute("SHOW hnsw.ef_search").fetchone()
            assert found is not None and found[0] == str(store._ef)
    finally:
        store.close()
