"""A store a newer recalld has migrated (a schema step this code does not know) is read but
never written: its tables may mean what this version would break. Opening it warns, search
and list answer, and every write is refused naming both versions and what to do."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.errors import StoreError
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.sqlite.migrations import SCHEMA_VERSION

FUTURE = SCHEMA_VERSION + 3


def test_a_store_from_a_newer_recalld_is_read_but_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "memory.db"
    options = Settings(db=db, cache_dir=tmp_path / "cache")
    with recalld.open(settings=options, embedder=FakeEmbedder()) as engine:
        engine.add_many(["the kayak club meets on Tuesdays", "my sister lives in Lisbon"])
    with sqlite3.connect(db) as newer:  # what a later recalld records for its own step
        newer.execute("INSERT INTO migrations VALUES (?, 'm099_a_later_step', 0)", (FUTURE,))
    newer.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()

    with (
        caplog.at_level(logging.WARNING, logger="recalld"),
        recalld.open(settings=options, embedder=FakeEmbedder()) as engine,
    ):
        assert "newer recalld" in caplog.text
        assert engine.search("kayak").hits[0].memory.content.startswith("the kayak")
        assert len(engine.list()) == 2
        for write in (lambda: engine.add("a new memory"),
                      lambda: engine.forget([engine.list()[0].id])):  # fmt: skip
            with pytest.raises(StoreError) as refused:
                write()
            message = str(refused.value)
            assert f"schema version {FUTURE}" in message
            assert f"knows up to {SCHEMA_VERSION}" in message
            assert "m099_a_later_step" in message and "upgrade recalld" in message
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
