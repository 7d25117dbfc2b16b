"""Under the common umask 022, every file and folder recalld creates for a store and its
cache (the store and its -wal/-shm, the embedding cache, the data and cache folders, the word
and ANN index folders and their files, lock and state files) is its owner's alone: a
memory store holds private text, and a shared host has other accounts."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.providers.llm import ModelCache
from recalld.stores.sqlite import word_index
from recalld.stores.sqlite.store import SQLiteStore
from recalld.stores.sqlite.vectors import VectorMirror


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def readable_by_others(top: Path) -> list[str]:
    """Every path under ``top`` (itself included) that the group or others can reach."""
    found = []
    for path in [top, *top.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(top.parent)} {stat.filemode(mode)}")
    return found


def test_everything_recalld_creates_is_private(
    tmp_path: Path, umask_022: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tantivy")
    pytest.importorskip("onnxruntime")  # (loaded before usearch: see vector_index)
    pytest.importorskip("usearch")
    monkeypatch.setattr(word_index, "WORD_INDEX_MIN_ROWS", 100)
    data, cache = tmp_path / "home" / "data" / "recalld", tmp_path / "home" / "cache" / "r"
    workspace = tmp_path / "workspace"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "MEMORY.md").write_text("# Notes\n\nThe kayak club meets on Tuesdays.\n")
    settings = Settings(db=data / "memory.db", cache_dir=cache)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        assert isinstance(engine.store, SQLiteStore)
        engine.store.vector_reads.mirror = VectorMirror(
            Path(f"{data}/memory.db.ann"), ann_min_rows=100, subset_exact_rows=10, build_threads=1
        )
        engine.add_many([f"memory {i} about the river trip number {i}" for i in range(300)])
        engine.index([workspace])
        assert engine.search("river trip").hits
        ModelCache(cache / "models.sqlite").close()  # model answers (query expansions)
        created = sorted(p.name for p in data.iterdir())
        assert {"memory.db", "memory.db-wal", "memory.db-shm", "memory.db.words",
                "memory.db.ann"} <= set(created), created  # fmt: skip
        assert any((data / "memory.db.ann").glob("*.usearch"))
        assert (data / "memory.db.words" / "covered.json").exists()
        assert (cache / "embeddings.sqlite").exists() and (cache / "models.sqlite").exists()
        # Checked while the store is open: its -wal and -shm exist now.
        assert readable_by_others(tmp_path / "home") == []


def test_a_store_s_own_modes_stay_as_its_owner_set_them(tmp_path: Path, umask_022: None) -> None:
    """A folder or store that exists keeps its mode: recalld creates private, never chmods
    what a person made."""
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    SQLiteStore(folder / "m.db").close()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert stat.S_IMODE((folder / "m.db").stat().st_mode) == 0o600


def test_status_advises_when_others_can_read_the_store(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    assert not any("chmod 600" in a for a in store.stats().advice)
    os.chmod(path, 0o644)  # as an older recalld made it
    advice = store.stats().advice
    store.close()
    assert any("chmod 600" in a and str(path) in a for a in advice), advice
