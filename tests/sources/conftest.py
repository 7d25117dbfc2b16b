from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sources_helpers import make_workspace

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder


@pytest.fixture
def fake() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def eng(tmp_path: Path, fake: FakeEmbedder) -> Iterator[recalld.MemoryEngine]:
    """An engine on a fresh store, fake embedder, no embedding cache (calls are countable)."""
    settings = Settings(db=tmp_path / "store.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=fake) as engine:
        yield engine


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws")
