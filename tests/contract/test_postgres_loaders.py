"""The store's own loaders for ``vector`` and ``jsonb`` columns (cheaper than pgvector's and
psycopg's, for a search's hundred rows) give exactly the values those give, in both
formats: the floats of every vector, bit for bit, as native ``float32`` arrays; every JSON
value, an empty object as a fresh dict each time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder

pytestmark = pytest.mark.postgres

VECTORS = [
    np.array([0.0, -0.0, 1.0, -1.5, 3.4e38, -3.4e38, 1e-45, 0.1], dtype=np.float32),
    np.random.default_rng(7).standard_normal(384).astype(np.float32),
    np.array([2.5], dtype=np.float32),
]
MAPPINGS: list[Any] = [
    {},
    {"a": 1},
    {"speaker": "Ann", "nested": {"list": [1, 2.5, None, True], "empty": {}}},
    {"": ""},
    [],
    "text",
    0,
    None,
]


def _connections(dsn: str) -> tuple[Any, Any]:
    import psycopg
    from pgvector.psycopg import register_vector

    from recalld.stores.postgres.loaders import register

    plain = psycopg.connect(dsn, autocommit=True)
    plain.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(plain)
    ours = psycopg.connect(dsn, autocommit=True)
    register(ours)
    return plain, ours


@pytest.mark.parametrize("binary", [True, False])
def test_vectors_load_as_the_float32_arrays_pgvector_reads(pg_database: str, binary: bool) -> None:
    plain, ours = _connections(pg_database)
    with plain, ours:
        for vector in VECTORS:
            sql = "SELECT %s::vector, NULL::vector"
            expected = plain.execute(sql, (vector,), binary=binary).fetchone()
            got = ours.execute(sql, (vector,), binary=binary).fetchone()
            assert expected is not None and got is not None
            assert got[1] is None
            array = got[0]
            assert isinstance(array, np.ndarray) and array.dtype == np.dtype(np.float32)
            assert array.dtype.isnative and array.flags.writeable
            want = np.asarray(expected[0].to_numpy(), dtype=np.float32)
            assert array.tobytes() == want.tobytes() == vector.tobytes()


@pytest.mark.parametrize("binary", [True, False])
def test_mappings_load_as_json_does_and_empty_ones_fresh(pg_database: str, binary: bool) -> None:
    from psycopg.types.json import Jsonb

    plain, ours = _connections(pg_database)
    with plain, ours:
        for value in MAPPINGS:
            sql = "SELECT %s::jsonb, NULL::jsonb"
            expected = plain.execute(sql, (Jsonb(value),), binary=binary).fetchone()
            got = ours.execute(sql, (Jsonb(value),), binary=binary).fetchone()
            assert got == expected and got is not None
            assert type(got[0]) is type(value)
        first, second = ours.execute("SELECT '{}'::jsonb, '{}'::jsonb", binary=binary).fetchone()
        assert first == second == {} and first is not second


def test_a_stores_vectors_and_metadata_come_back_as_written(pg_database: str) -> None:
    """Through the store: a lookup's vectors (as pgvector reads them from the table), a
    search over them, and memories' metadata, empty or not, each memory's its own."""
    settings = Settings(db=pg_database, cache_dir=None)
    texts = ["alpha lantern quartz", "beta lantern meadow", "gamma quartz meadow"]
    metas: list[dict[str, Any]] = [{}, {"speaker": "Ann", "n": [1, 2]}, {}]
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        ids = [engine.add(t, metadata=m).id for t, m in zip(texts, metas, strict=True)]
        got = [engine.get(i) for i in ids]
        assert [m.metadata for m in got] == metas
        got[0].metadata["changed"] = True  # each memory's mapping its own
        assert engine.get(ids[2]).metadata == {}
        vectors = engine.store.vectors_for(ids)
        hits = engine.search("lantern quartz", limit=3).hits
        assert hits and {h.memory.id for h in hits} <= set(ids)
    plain, ours = _connections(pg_database)
    ours.close()
    with plain:
        for memory_id, vector in plain.execute("SELECT id, embedding FROM memories").fetchall():
            assert vectors[memory_id].dtype == np.float32
            assert np.array_equal(vectors[memory_id], vector.to_numpy())
