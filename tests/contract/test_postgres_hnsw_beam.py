"""A tenant's own HNSW index, built with a wide beam, is searched with the candidates its
graph needs: fewer than an index of the same rows built with pgvector's default beam."""

from __future__ import annotations

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory
from recalld.stores.base import Tenancy

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
