"""The exact scan through BLAS: the rows and scores of numpy's own loop over every row."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from recalld.records import Memory
from recalld.stores.sqlite import SQLiteStore, exact_scan
from recalld.stores.sqlite.exact_scan import BLAS_MIN_ROWS, best_rows, cosines
from recalld.stores.sqlite.vectors import VectorMirror
from recalld.text import content_hash

DIM = 384
ROWS = BLAS_MIN_ROWS + 4_000
NOW = datetime(2026, 1, 1, tzinfo=UTC)

pytestmark = pytest.mark.skipif(
    not exact_scan._BLAS.available(), reason="no BLAS library found by threadpoolctl"
)


def near_ties(seed: int, norm: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A matrix whose rows mostly score within float32's rounding of each other (one
    direction, nudged in the last bits), some of them duplicates, and a query."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(DIM).astype(np.float32)
    base /= np.linalg.norm(base)
    matrix = np.repeat(base[None, :], ROWS, axis=0)
    nudged = rng.random((ROWS, DIM)) < 0.05
    matrix[nudged] = np.nextafter(matrix[nudged], np.float32(rng.choice([-1, 1])))
    matrix[rng.integers(0, ROWS, 400)] = matrix[7]  # exact ties
    spread = rng.standard_normal((ROWS // 2, DIM)).astype(np.float32)
    matrix[ROWS // 2 :] = spread / np.linalg.norm(spread, axis=1, keepdims=True)
    query = (base + 0.01 * rng.standard_normal(DIM)).astype(np.float32)
    return matrix * np.float32(norm), query / np.linalg.norm(query)


def by_loop(matrix: np.ndarray, query: np.ndarray, count: int, mask=None) -> list[int]:
    """numpy's own loop over every row: the best ``count``, ties by row."""
    scores = cosines(matrix, query)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    rows = np.arange(len(scores))
    if mask is not None:
        rows, scores = rows[mask], scores[mask]
    return [int(r) for r in rows[np.lexsort((rows, -scores))[:count]]]


def ranked(matrix: np.ndarray, query: np.ndarray, rows: np.ndarray) -> list[int]:
    scores = cosines(matrix[rows], query)
    return [int(r) for r in rows[np.lexsort((rows, -scores))]]


@pytest.mark.parametrize("seed", range(4))
def test_the_rows_are_those_of_numpys_loop_where_blas_ranks_otherwise(seed: int) -> None:
    matrix, query = near_ties(seed)
    quick = matrix @ query
    differs = 0
    for count in (10, 200, 1_000):
        expected = by_loop(matrix, query, count)
        # BLAS's own best `count` are not those rows: without the band this test fails
        own = np.argsort(-quick, kind="stable")[:count]
        differs += set(own.tolist()) != set(expected)
        assert ranked(matrix, query, best_rows(matrix, query, None, count, 1.0)) == expected
    assert differs, "the sums agreed on every row: the case tests nothing"


def test_a_mask_and_rows_of_any_norm_keep_the_exact_rows() -> None:
    matrix, query = near_ties(9, norm=40.0)
    mask = np.random.default_rng(3).random(ROWS) < 0.6
    for count in (1, 50, 500):
        expected = by_loop(matrix, query, count, mask)
        got = best_rows(matrix, query, mask, count, float(np.linalg.norm(matrix, axis=1).max()))
        assert ranked(matrix, query, got) == expected
    assert best_rows(matrix, query, np.zeros(ROWS, dtype=bool), 10, 40.0).size == 0
    few = np.zeros(ROWS, dtype=bool)
    few[[5, 900, ROWS - 1]] = True
    assert sorted(best_rows(matrix, query, few, 10, 40.0).tolist()) == [5, 900, ROWS - 1]


def test_blas_runs_on_one_thread_and_the_callers_setting_comes_back() -> None:
    controllers = exact_scan._BLAS._found()
    before = [c.get_num_threads() for c in controllers]
    seen: list[list[int]] = []
    entered, leave = threading.Barrier(2), threading.Event()

    def scan() -> None:
        with exact_scan._BLAS.one_thread():
            entered.wait(5)
            seen.append([c.get_num_threads() for c in controllers])
            leave.wait(5)

    other = threading.Thread(target=scan)
    other.start()
    with exact_scan._BLAS.one_thread():
        entered.wait(5)
        leave.set()
        other.join(5)
        seen.append([c.get_num_threads() for c in controllers])  # the other scan ended
    assert seen == [[1] * len(controllers)] * 2
    assert [c.get_num_threads() for c in controllers] == before


def test_a_stores_mirror_answers_as_numpys_loop(tmp_path: Path) -> None:
    matrix, _ = near_ties(5)
    matrix *= np.float32(3.0)  # rows not of unit norm: the band must widen with them
    store = SQLiteStore(tmp_path / "m.db")
    memories = []
    for i in range(ROWS):
        text = f"memory {i}"
        memories.append(Memory(id=f"m{i}", content=text, type="fact", created_at=NOW,
                               updated_at=NOW, content_hash=content_hash(text)))  # fmt: skip
    store.insert(memories, matrix)
    store.close()
    mirror = VectorMirror(None, ann_min_rows=10**9)
    with sqlite3.connect(tmp_path / "m.db") as db:
        mirror.refresh(db)
        pks = [pk for (pk,) in db.execute("SELECT pk FROM vectors ORDER BY pk")]
    queries = [near_ties(s)[1] for s in (5, 12, 13)]
    for query in queries:
        full = cosines(mirror.matrix, query)
        rows = np.arange(len(full))
        order = rows[np.lexsort((rows, -full))][:216]
        expected = [(int(mirror.pks[r]), float(full[r])) for r in order]
        assert mirror.search(query, 216, None) == expected
    assert len(pks) == ROWS
