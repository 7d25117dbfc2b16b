"""The SQLite store reads a memory's session neighbours around it (stores/sqlite/neighbors.py),
with the answer of reading its sessions whole, whatever holes the positions leave."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory
from recalld.stores.base import neighbors_in_sessions
from recalld.stores.sqlite.store import SQLiteStore


def whole_sessions(path: Path, ids: Sequence[str], radius: int) -> dict[str, list[tuple[str, int]]]:
    """The reference: every live member of the centres' sessions, in storage order."""
    db = sqlite3.connect(path)
    marks = ",".join("?" * len(ids))
    sessions = sorted(
        set(
            db.execute(
                "SELECT namespace, session_id FROM memories"
                f" WHERE id IN ({marks}) AND session_id IS NOT NULL",
                list(ids),
            ).fetchall()
        )
    )
    rows = []
    for namespace, session in sessions:
        rows += db.execute(
            "SELECT id, namespace, session_id FROM memories WHERE namespace = ?"
            " AND session_id = ? AND forgotten_at IS NULL ORDER BY position, pk",
            (namespace, session),
        ).fetchall()
    db.close()
    return neighbors_in_sessions(rows, ids, radius)


def test_windows_answer_as_whole_sessions_do(tmp_path: Path) -> None:
    """Gaps, positions given twice, members without a position, forgotten members and
    centres at either end: the same neighbours as the sessions read whole."""
    path = tmp_path / "m.db"
    rng = random.Random(5)
    sessions = {f"s{k}": rng.randint(1, 12) for k in range(40)}
    with recalld.open(settings=Settings(db=path, cache_dir=None), embedder=FakeEmbedder()) as e:
        e.add_many(
            [
                NewMemory(content=f"turn {i} of {s}", session_id=s, id=f"{s}-{i}")
                for s, turns in sessions.items()
                for i in range(turns)
            ]
        )
        e.add("a note of no session", id="lone")
        every = [f"{s}-{i}" for s, turns in sessions.items() for i in range(turns)]
        e.forget(rng.sample(every, 25))
    db = sqlite3.connect(path)
    with db:
        for memory_id in rng.sample(every, 60):
            position = rng.choice([None, -3, 0, 1, 2, 5, 9, 30])
            db.execute("UPDATE memories SET position = ? WHERE id = ?", (position, memory_id))
    db.close()
    store = SQLiteStore(path)
    try:
        for radius in (1, 2, 3):
            for _ in range(60):
                ids = rng.sample([*every, "lone", "unknown"], rng.randint(1, 25))
                assert store.session_neighbors(ids, radius) == whole_sessions(path, ids, radius)
    finally:
        store.close()


def test_a_long_session_is_not_read_whole(tmp_path: Path) -> None:
    """One turn's neighbours in a session of 3,000 turns: SQLite steps through a few rows,
    not the session (reading it whole took over 100 times the steps)."""
    path = tmp_path / "m.db"
    with recalld.open(settings=Settings(db=path, cache_dir=None), embedder=FakeEmbedder()) as e:
        e.add_many(
            [NewMemory(content=f"turn {i}", session_id="long", id=f"t{i}") for i in range(3000)]
        )
    store = SQLiteStore(path)
    try:
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        store._db.set_progress_handler(count, 100)  # every 100 virtual machine steps
        got = store.session_neighbors(["t1500"], 2)
        store._db.set_progress_handler(None, 0)
    finally:
        store.close()
    assert got == {"t1500": [("t1498", -2), ("t1499", -1), ("t1501", 1), ("t1502", 2)]}
    assert steps[0] < 20, steps
