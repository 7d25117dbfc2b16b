"""A store restored from a backup beside a word index that followed the store further: the
restored log numbers its new entries again from where the backup stopped, so the numbers
alone would tell the index it is up to date. Its mark's stamp tells it otherwise: searches
stand aside, and the next write rebuilds the index (and logs why)."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import pytest
from tests.scale.test_word_index import answered_by_index, bm25, corpus, fts5, ids, memory

from recalld.stores.sqlite import SQLiteStore, word_index

pytest.importorskip("tantivy")


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(word_index, "WORD_INDEX_MIN_ROWS", 100)


def backup(source: Path, target: Path) -> None:
    """SQLite's online backup, as ``sqlite3 db '.backup target'`` takes it."""
    with sqlite3.connect(source) as live, sqlite3.connect(target) as copy:
        live.backup(copy)
    live.close()
    copy.close()


def restore(backup_file: Path, path: Path) -> None:
    """Put the backup in place of the store (stopped), keeping ``<db>.words/``."""
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup_file, path)


@pytest.mark.parametrize("added_after_backup", [1, 3])
def test_a_restored_store_s_new_memories_are_found_by_the_word_index(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    added_after_backup: int,
) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.insert(corpus(600), None)  # builds the index
    store.close()
    backup(path, tmp_path / "backup.db")
    store = SQLiteStore(path)
    store.insert([memory(9000 + i, f"lost zeppelin {i}") for i in range(added_after_backup)],
                 None)  # fmt: skip
    store.close()
    restore(tmp_path / "backup.db", path)

    store = SQLiteStore(path)
    answers = answered_by_index(store, monkeypatch)
    # Before any write, a search does not trust the index: FTS5 answers.
    assert bm25(store, ("zeppelin",)) == [] and answers == [False]
    with caplog.at_level(logging.WARNING, logger="recalld"):
        store.insert([memory(9500, "a quokka on the ferry")], None)
    assert "rebuilding the word index" in caplog.text and "backup" in caplog.text
    assert ids(bm25(store, ("quokka",))) == ["m09500"]
    assert answers[-1] is True  # the rebuilt index answered, and found it
    assert bm25(store, ("zeppelin",)) == []  # rows the restore undid are gone from it too
    assert ids(bm25(store, ("kayak",))) == ids(fts5(store, ("kayak",)))
    covered = json.loads((Path(f"{path}.words") / "covered.json").read_text())
    assert covered["stamp"] is not None


def test_an_index_written_before_stamps_still_catches_up(tmp_path: Path) -> None:
    """A ``covered.json`` without a stamp (an older recalld's) is followed by its number, and
    the next catch-up records the stamp."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.insert(corpus(600), None)
    file = Path(f"{path}.words") / "covered.json"
    covered = json.loads(file.read_text())
    file.write_text(json.dumps({k: v for k, v in covered.items() if k != "stamp"}))
    store.insert([memory(9600, "an okapi at dusk")], None)
    assert ids(bm25(store, ("okapi",))) == ["m09600"]
    assert json.loads(file.read_text())["stamp"] is not None
