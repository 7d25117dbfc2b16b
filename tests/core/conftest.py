"""Fixtures for the core tests: an engine factory on a real SQLite file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder, FakeEmbedder


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., recalld.MemoryEngine]]:
    """Open engines on ``tmp_path/memory.db`` (any embedder, fake by default); closes them all."""
    opened: list[recalld.MemoryEngine] = []

    def _open(embedder: Embedder | None = None, **settings: Any) -> recalld.MemoryEngine:
        values = {"db": tmp_path / "memory.db", "cache_dir": tmp_path / "cache", **settings}
        engine = recalld.open(settings=Settings(**values), embedder=embedder or FakeEmbedder())
        opened.append(engine)
        return engine

    yield _open
    for engine in opened:
        engine.close()
