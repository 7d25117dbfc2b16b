from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from model_server import ModelServer, model_server

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory

MEMORIES = [
    NewMemory("My sister Ana arrives from Porto on Friday.", id="sister",
              metadata={"role": "user"}),
    NewMemory("I prefer green tea over coffee in the morning.", id="tea",
              metadata={"role": "user"}),
    NewMemory("Try a jasmine tea from the Chinese grocery.", id="tea-advice",
              metadata={"role": "assistant"}),
    NewMemory("The billing deploy broke; pinning psycopg to 3.2 fixed it.", id="deploy"),
    NewMemory("Lisbon was sunny all week.", id="lisbon"),
    NewMemory("Ana is my only sibling and she works as a nurse.", id="sibling"),
    NewMemory("We adopted a puppy called Miso last spring.", id="puppy"),
    NewMemory("The zebrafish experiment needs a new incubator.", id="zebrafish"),
]  # fmt: skip


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with model_server() as running:
        yield running


def open_corpus(tmp_path: Path, **settings: Any) -> recalld.MemoryEngine:
    """A store of :data:`MEMORIES` (fake embedder) with the given model settings."""
    values: dict[str, Any] = {"db": tmp_path / "m.db", "cache_dir": tmp_path / "cache",
                              **settings}  # fmt: skip
    engine = recalld.open(settings=Settings(**values), embedder=FakeEmbedder())
    engine.add_many(MEMORIES)
    return engine


def ranking(result: recalld.SearchResult) -> list[tuple[str, float]]:
    return [(h.memory.id, h.score) for h in result.hits]
