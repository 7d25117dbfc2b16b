"""The ANN index's int8 copies kept as one mapped matrix beside it (copy_file): a large
filtered subset (a time window of a large store) is ranked by one gather from the file, to
the same scores as the index's own copies read one by one, and the file follows the index
through another process's writes and saves."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld.stores.base import CandidateRequest, NearestAsk
from recalld.stores.sqlite import SQLiteStore, copy_file, vector_file, vector_index
from recalld.stores.sqlite.lazy_vectors import PRESELECT_FACTOR, LazyAnn
from recalld.stores.sqlite.vector_index import AnnIndex
from recalld.stores.sqlite.vectors import VectorMirror

pytest.importorskip("onnxruntime")  # see vector_index._usearch_index: load it first
pytest.importorskip("usearch")

from test_lazy_vectors import nearest_where, opened, same  # noqa: E402
from test_vector_mirror import NOW, clustered, fill, memory  # noqa: E402

EVEN = "m.pk % 2 = 0"
"""A filter keeping 600 of the 1,200 rows: past :data:`PRESELECT_FACTOR` x the rows asked,
so the subset is ranked by the copies first (a month of the 1M store keeps 42k)."""


def in_subset(store: SQLiteStore, query: np.ndarray, limit: int = 10) -> list[tuple[str, float]]:
    """The nearest of the rows ``EVEN`` keeps, listed (as a time window of up to
    ``subset_exact_rows`` rows is), from the saved index."""
    keep = store.vector_reads.pks_where(EVEN, [])
    found = store.vector_reads.nearest(query, limit, None, keep)
    return [(c.memory_id, c.score) for c in found]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """1,200 memories and their saved index, with its copies file (a first process's
    search)."""
    path = tmp_path / "m.db"
    first = opened(path, lazy=False)
    fill(first, 0, clustered(1200, seed=61))
    first.candidates(CandidateRequest(asks={"semantic": NearestAsk(5, clustered(1, 1)[0])}))
    first.close()
    return path


def subsets(path: Path) -> SQLiteStore:
    """The store searched from its saved index, a filter of up to 1,000 rows exactly."""
    store = SQLiteStore(path)
    store.vector_reads.mirror = VectorMirror(
        Path(f"{path}.ann"), ann_min_rows=100, subset_exact_rows=1000, build_threads=1
    )
    return store


def lazy_of(store: SQLiteStore) -> LazyAnn:
    in_subset(store, clustered(1, 62)[0])  # the index opened and caught up
    lazy = store.vector_reads.lazy
    assert lazy is not None and store.vector_reads.mirror.size == 0
    return lazy


def exact_where(path: Path, query: np.ndarray, limit: int) -> list[tuple[str, float]]:
    """The truth: every vector of the rows ``EVEN`` keeps, scored."""
    store = opened(path, lazy=False)
    store.search_exactly()
    found = [(c.memory_id, c.score) for c in nearest_where(store, query, limit, EVEN)]
    store.close()
    return found


def ranked_one_by_one(ann: AnnIndex, keep: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The scores of the index's copies of ``keep`` as read before the file: one by one."""
    read = ann.copies(keep)
    matrix = np.stack([row for row in read if row is not None])
    return copy_file.copy_cosines(matrix, query, copy_file.copy_norms(matrix))


def counting_copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each read of the index's copies asks for, as it runs."""
    asked: list[int] = []
    reading = AnnIndex.copies

    def counted(self: AnnIndex, pks: np.ndarray) -> list[Any]:
        asked.append(len(pks))
        return reading(self, pks)

    monkeypatch.setattr(AnnIndex, "copies", counted)
    return asked


def files(path: Path, pattern: str) -> list[Path]:
    return sorted(Path(f"{path}.ann").glob(pattern))


def test_the_copies_file_is_written_with_the_index_and_holds_its_copies(saved: Path) -> None:
    (index,) = files(saved, "*.usearch")
    (copies,) = files(saved, "*.copies")
    assert copies.stem == index.name.split(".")[0]  # the same seq as the index
    assert stat.S_IMODE(copies.stat().st_mode) == 0o600
    store = subsets(saved)
    ann = lazy_of(store).ann
    assert ann.copy_file is not None and len(ann.copy_file) == 1200
    keys = np.sort(ann.keys())
    found, matrix, norms = ann.copy_rows(keys)
    assert found.all()
    assert matrix.tobytes() == np.stack(ann.copies(keys)).tobytes()  # bit for bit
    assert np.array_equal(norms, copy_file.copy_norms(matrix))
    store.close()


def test_a_large_subset_is_ranked_from_the_file_as_by_the_index_copies(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows of a large filtered subset are ranked from the file, none asked of the index
    one by one, to the same scores; the answer is the exact one."""
    store = subsets(saved)
    lazy = lazy_of(store)
    asked = counting_copies(monkeypatch)
    keep = np.arange(2, 1201, 2, dtype=np.int64)[::-1].copy()  # in no pk order
    for query in clustered(6, seed=63):
        same(in_subset(store, query), exact_where(saved, query, 10))
        held, matrix, norms = lazy.ann.copy_rows(keep)
        got = copy_file.copy_cosines(matrix, query, norms)
        assert asked == [] and held.all()
        monkeypatch.undo()
        assert np.array_equal(got, ranked_one_by_one(lazy.ann, keep, query))
        asked = counting_copies(monkeypatch)
    chosen = lazy._preselected(keep, clustered(1, 64)[0], 26)
    assert len(chosen) == PRESELECT_FACTOR * 26 and asked == []
    store.close()


def test_the_copies_follow_another_process_writes_and_saves(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New, replaced and deleted rows written by another process: the rows changed since
    the file are the index's copies as it has them now (asked of it), the rest the file's;
    a filtered search stays exact. Once the index is saved, a new copies file of its seq
    replaces the old one, and a new process ranks from it alone."""
    monkeypatch.setattr(vector_index, "SAVE_FRACTION", 1.0)  # no save for now
    store = subsets(saved)
    lazy = lazy_of(store)
    first = files(saved, "*.copies")
    query = clustered(1, seed=65)[0]
    writer = multiprocessing.get_context("spawn").Process(
        target=_write_elsewhere, args=(str(saved), query)
    )
    writer.start()
    writer.join(120)
    assert writer.exitcode == 0
    found = in_subset(store, query)
    same(found, exact_where(saved, query, 10))
    assert found[0] == ("m7", pytest.approx(1.0, abs=1e-5))  # m7 (pk 8) is the query now
    ann = lazy.ann
    assert files(saved, "*.copies") == first and ann.copy_file is not None  # not saved yet
    every = np.arange(1, 1240, dtype=np.int64)
    held, matrix, norms = ann.copy_rows(every)
    now = ann.copies(every)
    assert held.tolist() == [row is not None for row in now]
    assert not held[[9 - 1, 10 - 1]].any()  # m8, m9 (pks 9, 10) gone; pk 8 is m7
    assert matrix.tobytes() == np.stack([row for row in now if row is not None]).tobytes()
    assert np.array_equal(norms, copy_file.copy_norms(matrix))
    scored, scores = ann.copy_scores(every[::-1].copy(), query)  # file and index mixed
    assert np.array_equal(scored, held[::-1])
    want = copy_file.copy_cosines(matrix[::-1].copy(), query, norms[::-1].copy())
    assert np.array_equal(scores, want)
    for probe in clustered(4, seed=66):
        same(in_subset(store, probe), exact_where(saved, probe, 10))
    monkeypatch.setattr(vector_index, "SAVE_FRACTION", 0.001)
    other = SQLiteStore(saved)
    fill(other, 1300, clustered(5, seed=67))
    other.close()
    in_subset(store, query)  # caught up, and saved
    (index,) = files(saved, "*.usearch")
    (copies,) = files(saved, "*.copies")
    assert copies != first[0] and copies.stem == index.name.split(".")[0]
    fresh = subsets(saved)
    fresh_lazy = lazy_of(fresh)
    asked = counting_copies(monkeypatch)
    for probe in clustered(4, seed=68):
        same(in_subset(fresh, probe), exact_where(saved, probe, 10))
    assert asked == [] and fresh_lazy.ann.copy_file is not None
    fresh.close()
    store.close()


def _write_elsewhere(path: str, query: np.ndarray) -> None:
    other = SQLiteStore(path)
    fill(other, 1200, clustered(30, seed=69))
    other.replace(memory(7), query)
    other.forget(["m8", "m9"], hard=True, at=NOW)
    other.close()


@pytest.mark.parametrize("left", ["no file", "another index's file", "a file cut short"])
def test_an_index_without_its_copies_gets_them_once(
    saved: Path, monkeypatch: pytest.MonkeyPatch, left: str
) -> None:
    """An index saved without its copies file (by an earlier recalld), or with one that is
    not its own, answers exactly from the index's copies, and the first process that opens
    it writes the file; the next one ranks from it alone."""
    (copies,) = files(saved, "*.copies")
    if left == "no file":
        copies.unlink()
    elif left == "another index's file":
        data = bytearray(copies.read_bytes())
        data[-24 * 1200 :] = np.full(24 * 1200, 3, np.int8).tobytes()  # other copies
        copies.write_bytes(bytes(data))
    else:
        copies.write_bytes(copies.read_bytes()[:-1])
    assert copy_file.CopyMatrix.open(copies.parent, int(copies.stem)) is None or (
        left == "another index's file"
    )
    store = subsets(saved)
    query = clustered(1, seed=70)[0]
    same(in_subset(store, query), exact_where(saved, query, 10))
    lazy = store.vector_reads.lazy
    assert lazy is not None and lazy.ann.copy_file is not None
    store.close()
    (written,) = files(saved, "*.copies")
    assert written.stem == copies.stem and stat.S_IMODE(written.stat().st_mode) == 0o600
    again = subsets(saved)
    asked = counting_copies(monkeypatch)
    lazy_of(again)
    same(in_subset(again, query), exact_where(saved, query, 10))
    assert max(asked, default=0) <= vector_index.SPOT_CHECKS  # the spot check alone
    again.close()


def a_file(pks: np.ndarray, dtype: Any = np.int8, seed: int = 71) -> copy_file.CopyMatrix:
    """A copies file's matrix over ``pks`` (ascending) of random copies, as opened."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        rows = rng.integers(-127, 128, (len(pks), 48), dtype=dtype)
    else:
        rows = rng.standard_normal((len(pks), 48)).astype(dtype)
    return copy_file.CopyMatrix(7, pks, copy_file.copy_norms(rows), rows)


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32])
def test_copies_scored_as_gathered_equal_the_gathered_matrix_scored(
    monkeypatch: pytest.MonkeyPatch, dtype: Any
) -> None:
    """Scoring the file's rows block by block as they are gathered, the copies cast inside
    the product, gives the scores of the gathered matrix cast whole, to the bit: the
    ranking of a large subset is unchanged whatever the block sizes."""
    saved = a_file(np.arange(1, 5001, dtype=np.int64) * 3, dtype)
    rows = np.random.default_rng(72).permutation(5000)[:3001]
    for query in clustered(3, seed=73):
        query = np.resize(query, 48).astype(np.float32)
        matrix, norms = saved.gather(rows)
        want = copy_file.copy_cosines(matrix, query, norms)
        for block in (1, 7, 1024, 5000):
            monkeypatch.setattr(copy_file, "SCORE_BLOCK", block)
            assert np.array_equal(saved.cosines(rows, query), want)
    assert saved.cosines(rows[:0], query).shape == (0,)


@pytest.mark.parametrize("spread", [1, 3, 5])
def test_a_pk_row_is_found_by_table_or_binary_search_alike(spread: int) -> None:
    """A file whose pks are dense enough finds rows by a table over their span, a sparser
    one by a binary search: for every pk asked (inside the span or not, held or not,
    changed since the file or not), whether the file holds it and at which row are what a
    binary search over the file's pks gives."""
    rng = np.random.default_rng(74)
    pks = np.sort(rng.choice(np.arange(100, 100 + 2000 * spread), 2000, replace=False))
    saved = a_file(pks.astype(np.int64))
    asked = np.concatenate([rng.integers(0, 100 + 2000 * spread + 50, 3000), pks[[0, -1]]])
    asked = asked.astype(np.int64)
    saved.note(pks[5:40:3])
    held, rows = saved.rows_of(asked)
    in_file, at = vector_file.positions(pks, asked)
    want = in_file & ~np.isin(asked, pks[5:40:3])
    assert np.array_equal(held, want) and held.any() and not held.all()
    assert np.array_equal(rows[held], at[held]) and np.array_equal(pks[rows[held]], asked[held])
    assert (saved._table is not None) == (spread <= copy_file.DENSE_SPAN)
