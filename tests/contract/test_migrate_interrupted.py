"""A ``recalld migrate`` killed mid-copy: the target says it is unfinished and refuses use
until the same command, run again, finishes the copy (identical to the source)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.migration import checksum
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory

MEMORIES = 6000
"""Six batches of the migration's 1000: a kill after the first lands mid-copy."""


def _rows(location: str) -> Callable[[], int]:
    """Count the destination's memory rows (of every tenant) from outside the migration."""
    if location.startswith("postgresql://"):
        import psycopg

        def pg_count() -> int:
            try:
                with psycopg.connect(location, connect_timeout=5) as conn:
                    found = conn.execute("SELECT count(*) FROM memories").fetchone()
                    return int(found[0]) if found else 0
            except psycopg.Error:  # the schema is not created yet
                return 0

        return pg_count
    import sqlite3

    def sqlite_count() -> int:
        try:
            with sqlite3.connect(f"file:{location}?mode=ro", uri=True, timeout=5) as db:
                return int(db.execute("SELECT count(*) FROM memories").fetchone()[0])
        except sqlite3.Error:  # no file, or no table yet
            return 0

    return sqlite_count


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def destination(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return str(tmp_path / "destination.db")


@pytest.mark.integration
def test_a_killed_migrate_is_marked_refused_and_finished_by_a_rerun(
    tmp_path: Path, destination: str, cli_env: dict[str, str], recalld_command: list[str]
) -> None:
    source = str(tmp_path / "source.db")
    with recalld.open(settings=Settings(db=source, cache_dir=None, tenant="alice"),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        engine.add_many([NewMemory(f"note {i}: the crane at berth {i % 97} was serviced",
                                   session_id=f"s{i // 50}") for i in range(MEMORIES)])  # fmt: skip
        expected = checksum(engine.store, "alice")
    env = {**cli_env, "RECALLD_EMBEDDER": "fake", "RECALLD_TENANT": "alice"}
    command = [*recalld_command, "migrate", source, destination]
    rows = _rows(destination)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while process.poll() is None and rows() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    copied = rows()
    assert process.returncode == -signal.SIGKILL, "the migration finished before the kill"
    assert 0 < copied < MEMORIES, copied

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*recalld_command, "--db", destination, *argv], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    status = run("status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["store"]["unfinished_migration"] is True
    assert "unfinished copy" in run("status").stdout
    refused = run("search", "crane")
    assert refused.returncode != 0
    assert "recalld migrate" in refused.stderr and "unfinished copy" in refused.stderr
    assert "Traceback" not in refused.stderr

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"copied {MEMORIES} memories ({MEMORIES} with vectors)" in again.stdout
    with recalld.open(settings=Settings(db=destination, cache_dir=None, tenant="alice"),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        assert checksum(engine.store, "alice") == expected
        assert engine.status().store.unfinished_migration is False
        assert engine.search("crane at berth 42", limit=3).hits
    assert rows() == MEMORIES
