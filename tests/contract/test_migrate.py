"""``recalld migrate``: SQLite -> PostgreSQL -> SQLite keeps every memory, vector and result."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import recalld
from recalld.config import Settings
from recalld.interfaces.cli import cli
from recalld.migration import checksum
from recalld.providers.embedders import FakeEmbedder

FIXTURES = Path(__file__).parent.parent / "fixtures"
QUESTIONS = ["What is my iguana called?", "How many kilometres did I cycle?", "sister visit",
             "bike repair in June", "what did Caroline paint?"]  # fmt: skip

pytestmark = pytest.mark.postgres


def _results(location: str) -> list[list[tuple[str, float]]]:
    with recalld.open(settings=Settings(db=location, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        return [[(h.memory.id, round(h.score, 6)) for h in engine.search(
            q, mode="vector", limit=10, as_of=None).hits] for q in QUESTIONS]  # fmt: skip


def test_round_trip_sqlite_postgres_sqlite(tmp_path: Path, pg_database: str) -> None:
    first = str(tmp_path / "first.db")
    with recalld.open(settings=Settings(db=first, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        engine.import_transcript(FIXTURES / "longmemeval_tiny.json", "longmemeval")
        engine.import_transcript(FIXTURES / "locomo_tiny.json", "locomo")
        engine.forget(engine.list(limit=1)[0].id)
        expected = engine.status().store
    back = str(tmp_path / "back.db")
    there = recalld.migrate_store(first, pg_database)
    again = recalld.migrate_store(pg_database, back)
    assert there.memories == again.memories == expected.memories + expected.forgotten
    assert there.checksum == again.checksum
    assert there.with_vectors == again.with_vectors == expected.with_vectors
    results = [_results(location) for location in (first, pg_database, back)]
    assert results[0] == results[1] == results[2]
    with recalld.open(settings=Settings(db=back, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        status = engine.status().store
        assert (status.memories, status.forgotten, status.sessions) == (
            expected.memories, expected.forgotten, expected.sessions)  # fmt: skip
        assert checksum(engine.store, "default")[0] == there.checksum


def test_refuses_another_embedders_vectors_and_a_full_destination(
    tmp_path: Path, pg_database: str
) -> None:
    source, other = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    with recalld.open(settings=Settings(db=source, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        engine.add("made by the 64-dimension fake")
    with recalld.open(settings=Settings(db=other, cache_dir=None),
                      embedder=FakeEmbedder(dimension=16, model_id="other")) as engine:  # fmt: skip
        engine.add("made by another embedder")
    with pytest.raises(recalld.EmbedderMismatchError):
        recalld.migrate_store(source, other)
    first = recalld.migrate_store(source, pg_database)
    assert recalld.migrate_store(source, pg_database) == first  # done already: verified again
    with recalld.open(settings=Settings(db=source, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        engine.add("a memory the copy does not hold")
    with pytest.raises(recalld.InvalidInputError, match="already holds"):
        recalld.migrate_store(source, pg_database)


def test_the_cli_command(tmp_path: Path, pg_database: str) -> None:
    source = str(tmp_path / "a.db")
    with recalld.open(settings=Settings(db=source, cache_dir=None, tenant="alice"),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        engine.add("alice's only memory")
    result = CliRunner().invoke(cli, ["--tenant", "alice", "migrate", source, pg_database])
    assert result.exit_code == 0, result.output
    assert "copied 1 memories (1 with vectors)" in result.output
