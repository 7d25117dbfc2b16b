"""Index builds on demand go through the engine (``MemoryEngine.build_index``), never
through an adapter reaching into a backend: a backend without them says so clearly."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.errors import InvalidInputError
from recalld.interfaces import cli_postgres
from recalld.providers.embedders import FakeEmbedder


@pytest.mark.parametrize("kind", ["vectors", "words"])
def test_an_sqlite_store_builds_no_index_on_demand(tmp_path: Path, kind: str) -> None:
    with recalld.open(settings=Settings(db=tmp_path / "m.db", cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        engine.add("a memory in SQLite")
        said: list[str] = []
        with pytest.raises(InvalidInputError, match="needs a PostgreSQL store"):
            engine.build_index(kind, progress=said.append)  # type: ignore[arg-type]
        assert said == [] and engine.status().store.memories == 1


def test_the_postgres_commands_reach_no_backend() -> None:
    """``recalld postgres tenant-index|word-index`` ask the engine: no ``engine.store``,
    no method looked up by name."""
    tree = ast.parse(inspect.getsource(cli_postgres))
    reached = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    called = [n.func.id for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]  # fmt: skip
    assert "store" not in reached and "getattr" not in called and "build_index" in reached
