"""Without the postgres extra, a PostgreSQL DSN fails with a message that names the extra."""

from __future__ import annotations

import sys

import pytest

import recalld
from recalld.config import Settings
from recalld.stores import open_store


def test_a_dsn_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    for name in ("recalld.stores.postgres", "recalld.stores.postgres.store"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(recalld.StoreError, match=r"pip install '\.\[postgres\]' in a clone"):
        open_store("postgresql://someone@/memories")
    with pytest.raises(recalld.StoreError, match="postgres extra"):
        recalld.open(settings=Settings(db="postgresql://someone@/memories", cache_dir=None))


def test_a_dsn_stays_a_dsn_and_a_file_a_path() -> None:
    assert Settings(db="postgresql://u@h/db").db == "postgresql://u@h/db"
    assert str(Settings(db="some/file.db").db) == "some/file.db"
    assert not isinstance(Settings(db="some/file.db").db, str)
