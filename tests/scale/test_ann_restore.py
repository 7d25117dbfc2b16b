"""A store restored from a backup beside the ANN index saved after the backup: the restored
store numbers its new vectors again from where the backup stopped (often at the same pks),
so the saved index looked as if it covered them and the new memories were not found by their
own vectors (94 of 100 in the probe). The index's newest covered rows are checked against the
table when it is opened: it is set aside, and built again."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from tests.scale.test_vector_mirror import clustered, memory

from recalld.stores.base import CandidateRequest, NearestAsk
from recalld.stores.sqlite import SQLiteStore
from recalld.stores.sqlite.vectors import VectorMirror

pytest.importorskip("onnxruntime")  # see vector_index._usearch_index: load it first
pytest.importorskip("usearch")


def opened(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    store.vector_reads.mirror = VectorMirror(
        Path(f"{path}.ann"), ann_min_rows=100, subset_exact_rows=10, build_threads=1
    )
    return store


def search(store: SQLiteStore, query: object, limit: int = 5) -> list[str]:
    found = store.candidates(CandidateRequest(asks={"semantic": NearestAsk(limit, query)}))
    return [c.memory_id for c in found["semantic"]]


@pytest.mark.parametrize("written_after_restore", [1, 60])
def test_a_restored_store_s_new_vectors_are_found(
    tmp_path: Path, written_after_restore: int
) -> None:
    path = tmp_path / "m.db"
    vectors = clustered(700, seed=1)
    store = opened(path)
    store.insert([memory(i) for i in range(500)], vectors[:500])
    search(store, vectors[0])  # builds and saves the index
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as live, \
            contextlib.closing(sqlite3.connect(tmp_path / "backup.db")) as copy:  # fmt: skip
        live.backup(copy)
    store = opened(path)
    store.insert([memory(500 + i) for i in range(100)], vectors[500:600])  # undone below
    search(store, vectors[0])  # saves the index past the backup
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(tmp_path / "backup.db", path)
    store = opened(path)
    new = range(600, 600 + written_after_restore)
    store.insert([memory(i) for i in new], vectors[600 : 600 + written_after_restore])
    store.close()

    for _ in range(2):  # the first finds the saved index wrong and builds it again
        reader = opened(path)
        missed = [i for i in new if f"m{i}" not in search(reader, vectors[i])]
        assert missed == []
        assert not {f"m{i}" for i in range(500, 600)} & set(search(reader, vectors[550]))
        reader.close()
