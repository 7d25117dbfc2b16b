"""Fixtures for the core tests: a fake-embedder engine factory and a store snapshot."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import Embedder, FakeEmbedder

Snapshot = dict[str, Any]


def store_snapshot(path: Path) -> Snapshot:
    """Every row recalld keeps in a store file, read through a separate read-only connection."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = ("memories", "memory_tags", "memory_entities", "meta")
        snap: Snapshot = {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables}
        snap["vectors"] = [
            (pk, hashlib.sha256(blob).hexdigest())
            for pk, blob in db.execute("SELECT pk, vector FROM vectors ORDER BY pk")
        ]
        snap["fts"] = db.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH 'a OR the OR x' ORDER BY 1"
        ).fetchall()
        return snap
    finally:
        db.close()


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
