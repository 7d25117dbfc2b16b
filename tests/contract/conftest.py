"""The contract suite's fixtures: every test runs on each backend, on a real database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import recalld
from recalld.bench.scale_postgres import temporary_database
from recalld.config import Settings
from recalld.providers.embedders import Embedder, FakeEmbedder

Opener = Callable[..., recalld.MemoryEngine]
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def pg_database(pg_admin_dsn: str) -> Iterator[str]:
    """A fresh, empty database for one test; dropped afterwards."""
    with temporary_database(pg_admin_dsn, "recalld_test") as dsn:
        yield dsn


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_location(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where this test's store lives: a fresh SQLite file, or a fresh PostgreSQL database."""
    if backend == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return str(tmp_path / "memory.db")


@pytest.fixture
def open_as(store_location: str, tmp_path: Path) -> Iterator[Opener]:
    """Open engines on the test's store for any tenant (fake embedder); closes them all."""
    opened: list[recalld.MemoryEngine] = []

    def _open(
        tenant: str = "default",
        shared: tuple[str, ...] = (),
        embedder: Embedder | None = None,
        **settings: Any,
    ) -> recalld.MemoryEngine:
        values = {"db": store_location, "cache_dir": None, "tenant": tenant, "shared": shared,
                  **settings}  # fmt: skip
        engine = recalld.open(settings=Settings(**values), embedder=embedder or FakeEmbedder())
        opened.append(engine)
        return engine

    yield _open
    for engine in opened:
        engine.close()
