"""A time window's rows counted and listed on another thread while the searching thread
walks the ANN graph for the nearest memories (vector_reads.window_rows_beside): the same
answers as one after the other, and a write landing between the listing and the window's
search never returns a memory that is gone."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld import threads
from recalld.records import MemoryFilter, TimeRange
from recalld.stores.asks import ChannelCandidate
from recalld.stores.base import CandidateRequest, NearestAsk
from recalld.stores.sqlite import SQLiteStore, queries as q, readers
from recalld.stores.sqlite.lazy_vectors import LazyAnn, Preranked
from recalld.stores.sqlite.vector_reads import VectorReads

pytest.importorskip("onnxruntime")  # see vector_index._usearch_index: load it first
pytest.importorskip("usearch")

from test_copy_file import lazy_of, saved, subsets  # noqa: E402, F401
from test_lazy_vectors import same  # noqa: E402
from test_vector_mirror import NOW, clustered, fill  # noqa: E402

JANUARY = TimeRange(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC))
MONTH_ROWS = "pk % 80 = 0"
"""15 of the 1,200 rows, moved into :data:`JANUARY`: few enough to be listed and searched
exactly (the store's ``passing_rows`` is 20 at this size)."""
YEAR = TimeRange(datetime(2024, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC))
YEAR_ROWS = "pk % 4 = 0"
"""300 rows (those of :data:`MONTH_ROWS` among them) in :data:`YEAR`: too many to list."""


def dated(path: Path) -> None:
    """Rows moved into the windows (their time, as a write of the memory would set it)."""
    with sqlite3.connect(path) as db:
        db.execute(
            f"UPDATE memories SET ref_time = ? WHERE {YEAR_ROWS}",
            (datetime(2024, 6, 1, tzinfo=UTC).timestamp(),),
        )
        db.execute(
            f"UPDATE memories SET ref_time = ? WHERE {MONTH_ROWS}",
            (datetime(2025, 1, 15, tzinfo=UTC).timestamp(),),
        )


def listed_on(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads each window listing ran on, as they run."""
    names: list[str] = []
    listing = VectorReads._window_listing

    def noted(self: VectorReads, *args: Any) -> Any:
        names.append(threading.current_thread().name)
        return listing(self, *args)

    monkeypatch.setattr(VectorReads, "_window_listing", noted)
    return names


def both(store: SQLiteStore, query: np.ndarray, window: TimeRange) -> list[tuple[str, float]]:
    """The window channel's answer to a request that asks for both vector channels."""
    asks = {"semantic": NearestAsk(10, query), "window_semantic": NearestAsk(10, query, window)}
    found = store.candidates(CandidateRequest(asks=asks))
    return [(c.memory_id, c.score) for c in found["window_semantic"]]


def exactly(path: Path, query: np.ndarray, where: str) -> list[tuple[str, float]]:
    """The truth: every vector of the rows ``where`` keeps, scored."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            f"SELECT m.id, v.vector FROM vectors v JOIN memories m ON m.pk = v.pk WHERE v.{where}"
        ).fetchall()
    scores = [
        (memory_id, float(np.frombuffer(blob, np.float32) @ query)) for memory_id, blob in rows
    ]
    return sorted(scores, key=lambda s: (-s[1], s[0]))[:10]


def test_a_window_is_listed_beside_and_answers_as_one_after_the_other(
    saved: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Machine not busy: the window's rows are listed on a window thread, and the window
    channel answers as it does on one thread (a listed month: exactly; a year too large to
    list: from the index's candidates, the same ones). Machine busy: on this thread."""
    dated(saved)
    store = subsets(saved)
    lazy_of(store)
    names = listed_on(monkeypatch)
    queries = clustered(4, seed=81)
    monkeypatch.setattr(threads, "machine_busy", lambda: True)
    alone = [(both(store, q, JANUARY), both(store, q, YEAR)) for q in queries]
    assert names == []
    monkeypatch.setattr(threads, "machine_busy", lambda: False)
    for query, (month, year) in zip(queries, alone, strict=True):
        same(both(store, query, JANUARY), exactly(saved, query, MONTH_ROWS))
        assert both(store, query, JANUARY) == month
        assert both(store, query, YEAR) == year
    assert len(names) == 3 * len(queries)
    assert all(name.startswith("recalld-window") for name in names)
    store.close()


def test_a_write_between_the_listing_and_the_search_returns_no_memory_gone(
    saved: Path,  # noqa: F811
) -> None:
    """Another process adds a row to the window and deletes listed rows after the window's
    rows were listed, before its search: the answer is the exact one over the rows listed
    that are still there (the search began before the write), none of those deleted; the
    next search sees the write."""
    dated(saved)
    store = subsets(saved)
    lazy_of(store)
    reads = store.vector_reads
    query = clustered(1, seed=82)[0]
    first = exactly(saved, query, MONTH_ROWS)
    gone = [first[0][0], first[3][0]]
    ask = NearestAsk(10, query, JANUARY)
    where, params = q.filter_sql(MemoryFilter(), store.tenancy.visible)
    scope = readers.Scope(lambda: store._db, where, list(params), store.tenancy.visible, True)
    listed = reads.window_rows_beside({"semantic": ask, "window_semantic": ask}, scope)
    assert listed is not None and listed.result().pks is not None
    writer = multiprocessing.get_context("spawn").Process(
        target=_write_elsewhere, args=(str(saved), query, gone)
    )
    writer.start()
    writer.join(120)
    assert writer.exitcode == 0
    got = _pairs(reads.window_semantic(ask, scope, listed))
    assert not {i for i, _ in got} & set(gone)
    same(got, exactly(saved, query, MONTH_ROWS))  # the month's rows listed, less those gone
    after = _pairs(reads.window_semantic(ask, scope))
    assert after[0] == ("m1300", pytest.approx(1.0, abs=1e-5))  # written into the window
    store.close()


def _pairs(found: list[ChannelCandidate]) -> list[tuple[str, float]]:
    return [(c.memory_id, c.score) for c in found]


def _write_elsewhere(path: str, query: np.ndarray, gone: list[str]) -> None:
    other = SQLiteStore(path)
    fill(other, 1300, query[None, :])  # before the deletes: a new row, not a listed pk reused
    other.forget(gone, hard=True, at=NOW)
    other.close()
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE memories SET ref_time = ? WHERE id = 'm1300'",
            (datetime(2025, 1, 20, tzinfo=UTC).timestamp(),),
        )


def test_a_large_window_is_ranked_beside_by_its_copies_while_that_stands(
    saved: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window of rows too many to score exactly, listed beside, is ranked there by the
    copies file too: the same rows chosen as under the lock, and the same answer, exact;
    a ranking made before a change the index noted, or for other rows, is made again."""
    dated(saved)
    store = subsets(saved)
    lazy = lazy_of(store)
    monkeypatch.setattr(LazyAnn, "passing_rows", lambda self, limit: 1000)  # 300 listed
    made: list[tuple[str, Preranked | None]] = []
    ranking = LazyAnn.preranked

    def noted(self: LazyAnn, *args: Any) -> Preranked | None:
        found = ranking(self, *args)
        made.append((threading.current_thread().name, found))
        return found

    monkeypatch.setattr(LazyAnn, "preranked", noted)
    queries = clustered(3, seed=83)
    monkeypatch.setattr(threads, "machine_busy", lambda: True)
    alone = [both(store, query, YEAR) for query in queries]
    assert made == []
    monkeypatch.setattr(threads, "machine_busy", lambda: False)
    for query, want in zip(queries, alone, strict=True):
        assert both(store, query, YEAR) == want
        same(want, exactly(saved, query, YEAR_ROWS))
    assert len(made) == len(queries)
    assert all(name.startswith("recalld-window") and found for name, found in made)

    keep = np.arange(4, 1201, 4, dtype=np.int64)[::-1].copy()
    query = queries[0]
    ranked = lazy.preranked(keep, query, 26)
    assert ranked is not None
    assert lazy._preselected(keep, query, 26, ranked) is ranked.chosen  # it stands
    assert np.array_equal(ranked.chosen, lazy._preselected(keep, query, 26))
    assert lazy._preselected(keep.copy(), query, 26, ranked) is not ranked.chosen
    assert lazy._preselected(keep, queries[1], 26, ranked) is not ranked.chosen
    file = lazy.ann.copy_file
    assert file is not None
    file.note(np.array([999_999], dtype=np.int64))  # a change noted since: made again
    again = lazy._preselected(keep, query, 26, ranked)
    assert again is not ranked.chosen and np.array_equal(again, ranked.chosen)
    file.note(keep[:1])  # a row of the window changed: not ranked from the file alone
    assert lazy.preranked(keep, query, 26) is None
    store.close()
