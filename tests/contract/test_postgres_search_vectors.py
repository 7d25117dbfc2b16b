"""A PostgreSQL search's one statement brings, with vectors asked, the vectors the vector
channel's completion reads (the first request's candidates of other channels that the
vector channel missed), those ranked past ``ROWS_DEPTH`` without their rows (``vec`` rows):
no lookup by id follows the statement. Each the very floats a lookup by id gives."""

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
"""Candidates asked of the word channel: past the statement's ``ROWS_DEPTH`` (50)."""


def _requests(engine: recalld.MemoryEngine, semantic: bool) -> list[CandidateRequest]:
    vector = engine.embedder.embed_query("lantern meadow")
    near = {"semantic": NearestAsk(5, vector)} if semantic else {}
    return [
        CandidateRequest(asks={**near, "bm25": WordsAsk(DEEP, ("lantern",))}),
        CandidateRequest(asks={"bm25": WordsAsk(DEEP, ("meadow",))}),
    ]


def test_the_vectors_completion_reads_come_with_the_statement(pg_database: str) -> None:
    from recalld.stores.postgres.searching import ROWS_DEPTH

    assert DEEP > ROWS_DEPTH
    settings = Settings(db=pg_database, cache_dir=None)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.add_many([NewMemory(f"lantern {i} by the meadow {i % 7}") for i in range(90)])
        store = engine.store
        rows = store.search_rows(_requests(engine, True), vectors=True)
        first = rows.channels[0]
        nearest = {c.memory_id for c in first["semantic"]}
        missed = {c.memory_id for c in first["bm25"]} - nearest
        assert missed - set(rows.memories)  # candidates whose rows were not sent
        ranked = {c.memory_id for found in rows.channels for c in found.get("bm25", ())
                  if c.rank <= ROWS_DEPTH}  # fmt: skip
        assert rows.vectors.keys() == missed | nearest | ranked  # nothing more
        want = store.vectors_for(sorted(rows.vectors))
        assert want.keys() == rows.vectors.keys()
        for memory_id, vector in rows.vectors.items():
            assert vector.dtype == np.float32
            assert np.array_equal(vector, want[memory_id])
        without = store.search_rows(_requests(engine, True), vectors=False)
        assert without.vectors == {} and without.channels == rows.channels
        assert without.memories.keys() == rows.memories.keys()
        # No vector channel asked: no completion, only the rows' vectors.
        words = store.search_rows(_requests(engine, False), vectors=True)
        assert words.vectors.keys() == set(words.memories) & words.candidate_ids
