"""A PostgreSQL search's one statement brings, with vectors asked, the vector of every
candidate: those ranked within ``ROWS_DEPTH`` with their rows, the others alone (``vec``
rows), so neither the vector channel's completion nor a later stage looks one up; each
the very floats a lookup by id gives."""

from __future__ import annotations

import numpy as np
import pytest

import recalld
from recalld import NewMemory
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.asks import NearestAsk, WordsAsk
from recalld.stores.base import CandidateRequest

pytestmark = pytest.mark.postgres

DEEP = 70
"""Candidates asked of each channel: past the statement's ``ROWS_DEPTH`` (50)."""


def _requests(engine: recalld.MemoryEngine) -> list[CandidateRequest]:
    vector = engine.embedder.embed_query("lantern meadow")
    return [
        CandidateRequest(
            asks={"semantic": NearestAsk(DEEP, vector), "bm25": WordsAsk(DEEP, ("lantern",))}
        )
    ]


def test_every_candidates_vector_comes_with_the_statement(pg_database: str) -> None:
    from recalld.stores.postgres.store import ROWS_DEPTH

    assert DEEP > ROWS_DEPTH
    settings = Settings(db=pg_database, cache_dir=None)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.add_many([NewMemory(f"lantern {i} by the meadow {i % 7}") for i in range(90)])
        store = engine.store
        rows = store.search_rows(_requests(engine), vectors=True)
        ids = sorted(rows.candidate_ids)
        beyond = set(ids) - set(rows.memories)
        assert beyond  # candidates whose rows were not sent
        want = store.vectors_for(ids)
        assert rows.vectors.keys() == want.keys() == set(ids)
        for memory_id, vector in rows.vectors.items():
            assert vector.dtype == np.float32
            assert np.array_equal(vector, want[memory_id])
        without = store.search_rows(_requests(engine), vectors=False)
        assert without.vectors == {} and without.channels == rows.channels
        assert without.memories.keys() == rows.memories.keys()
