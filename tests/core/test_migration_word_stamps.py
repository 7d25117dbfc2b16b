"""m012 from the previous version: the word log's pending entries are kept (without a stamp:
an index whose mark is such an entry is followed by its number), and every entry logged
after it carries a random stamp."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from recalld.stores.sqlite.migrations import MIGRATIONS, applied, migrate

STAMPS = 12
"""The number of the migration under test (later ones run after it)."""


def test_m012_keeps_the_pending_log_and_stamps_what_follows(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    try:
        applied(db)
        before = [m for m in MIGRATIONS if m[0] < STAMPS]  # as the version before m012 left it
        for number, name, step in before:
            step(db)
            db.execute("INSERT INTO migrations VALUES (?, ?, ?)", (number, name, time.time()))
        assert MIGRATIONS[STAMPS - 1][1] == "m012_word_change_stamps"
        db.execute("INSERT INTO meta VALUES ('app', 'recalld'), ('word_log', 'store-1')")
        insert = ("INSERT INTO memories (id, content, type, content_hash, created_at,"
                  " updated_at, ref_time) VALUES (?, ?, 'fact', 'h', 0, 0, 0)")  # fmt: skip
        db.execute(insert, ("a", "logged before the step"))
        assert migrate(db)[0] == "m012_word_change_stamps"
        db.execute(insert, ("b", "logged after the step"))
        db.execute("DELETE FROM memories WHERE id = 'a'")
        rows = db.execute("SELECT pk, stamp FROM word_changes ORDER BY seq").fetchall()
        assert [pk for pk, _ in rows] == [1, 2, 1]
        assert rows[0][1] is None and rows[1][1] is not None and rows[2][1] is not None
        assert rows[1][1] != rows[2][1]
    finally:
        db.close()
