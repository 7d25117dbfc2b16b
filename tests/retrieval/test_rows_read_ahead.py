"""The word thread reads its best candidates' rows while the vectors are still searched."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from recalld.records import Memory
from recalld.retrieval import candidates
from recalld.retrieval.candidates import READ_AHEAD_ROWS, read_candidates
from recalld.retrieval.channels import Need, request, split_channels
from recalld.stores.sqlite import SQLiteStore
from recalld.text import content_hash

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 8
COUNT = 150


@pytest.fixture
def store(tmp_path: Path):
    opened = SQLiteStore(tmp_path / "m.db")
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((COUNT, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    memories = []
    for i in range(COUNT):
        text = f"kayak trip number {i} " + "paddle " * (i % 7)
        memories.append(Memory(id=f"m{i:03d}", content=text, type="event", created_at=NOW,
                               updated_at=NOW, content_hash=content_hash(text)))  # fmt: skip
    opened.insert(memories, vectors)
    opened.parallel_reads = lambda: True  # type: ignore[method-assign]  # the premise: a large store
    yield opened
    opened.close()


def asked() -> list:
    need = Need({"semantic": 100, "bm25": 100}, ("kayak", "paddle"), "kayak paddle",
                with_vector=True)  # fmt: skip
    return [request(need)]


def test_the_best_word_candidates_come_with_their_rows_while_the_vectors_take_long(
    store: SQLiteStore,
) -> None:
    vector = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)

    def slow_embed() -> np.ndarray:
        time.sleep(0.5)  # the vector side still works when the words are read
        return vector

    found = read_candidates(store, asked(), slow_embed)
    words = [c.memory_id for c in found.channels[0]["bm25"]]
    assert len(words) == 100
    best = words[:READ_AHEAD_ROWS]
    assert set(found.memories) == set(best)
    assert found.memories == {m.id: m for m in store.get_many(best)}
    plain = store.search_rows([asked()[0].with_vector(vector)])
    assert found.channels[0] == plain.channels[0]


def test_nothing_is_read_ahead_once_the_vectors_are_done(store: SQLiteStore) -> None:
    _, words_part = split_channels(asked()[0])
    assert words_part is not None
    found = store.search_rows([words_part])
    done = threading.Event()
    done.set()
    assert candidates._rows_read_ahead(store, found, done).memories == {}
    reading = threading.Event()
    assert len(candidates._rows_read_ahead(store, found, reading).memories) == READ_AHEAD_ROWS
