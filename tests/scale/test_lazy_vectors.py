"""A new process searches a saved ANN index without loading every vector (lazy_vectors)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld.errors import EmbedderMismatchError
from recalld.records import MemoryFilter
from recalld.stores.asks import NearestAsk
from recalld.stores.base import CandidateRequest, ChannelCandidate
from recalld.stores.sqlite import SQLiteStore, readers
from recalld.stores.sqlite.vector_reads import VectorReads
from recalld.stores.sqlite.vectors import VectorMirror

pytest.importorskip("onnxruntime")  # see vector_index._usearch_index: load it first
pytest.importorskip("usearch")

from test_vector_mirror import NOW, check_against_table, clustered, fill, memory  # noqa: E402


def opened(path: Path, lazy: bool = True) -> SQLiteStore:
    """The store with a small ANN threshold; ``lazy=False`` forces the full mirror."""
    store = SQLiteStore(path)
    store.vector_reads.mirror = VectorMirror(
        Path(f"{path}.ann"), ann_min_rows=100, subset_exact_rows=50, build_threads=1
    )
    store.vector_reads.lazy_tried = not lazy
    return store


def save_index(path: Path) -> Path:
    """1,200 memories at ``path`` and their saved index (built by a first process's search)."""
    first = opened(path, lazy=False)
    fill(first, 0, clustered(1200, seed=21))
    first.candidates(CandidateRequest(asks={"semantic": NearestAsk(5, clustered(1, 1)[0])}))
    first.close()
    assert list(Path(f"{path}.ann").glob("*.usearch"))
    return path


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """:func:`save_index` in the test's folder."""
    return save_index(tmp_path / "m.db")


def dated_stores(tmp_path: Path) -> tuple[SQLiteStore, SQLiteStore]:
    """1,200 memories an hour apart (memory i dated i hours before NOW) with their saved
    index: a handle on the index that lists windows of up to 1,000 rows, and one searching
    exactly."""
    from datetime import timedelta

    path = tmp_path / "dated.db"
    store = SQLiteStore(path)
    vectors = clustered(1200, seed=36)
    store.insert([replace(memory(i), event_time=NOW - timedelta(hours=i)) for i in range(1200)],
                 vectors)  # fmt: skip
    store.close()
    first = opened(path, lazy=False)  # builds and saves the index, as a first process would
    first.candidates(CandidateRequest(asks={"semantic": NearestAsk(5, vectors[0])}))
    first.close()
    store = SQLiteStore(path)
    store.vector_reads.mirror = VectorMirror(
        Path(f"{path}.ann"), ann_min_rows=100, subset_exact_rows=1000, build_threads=1
    )
    exact = opened(path, lazy=False)
    exact.search_exactly()
    return store, exact


def semantic(store: SQLiteStore, query: np.ndarray, **filters: object) -> list[tuple[str, float]]:
    request = CandidateRequest(
        filters=MemoryFilter(**filters), asks={"semantic": NearestAsk(10, query)}
    )  # type: ignore[arg-type]
    return [(c.memory_id, c.score) for c in store.candidates(request)["semantic"]]


def same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    """Same ids in the same order, the same cosines (to the last bits of a matrix product)."""
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_lazy_answers_equal_the_mirrors_without_loading_it(saved: Path) -> None:
    lazy, full = opened(saved), opened(saved, lazy=False)
    lazy.forget(["m5", "m6"], hard=False, at=NOW)  # hidden rows, still in the index
    for query in clustered(15, seed=22):
        same(semantic(lazy, query), semantic(full, query))
        same(semantic(lazy, query, session_id="s1"), semantic(full, query, session_id="s1"))
    assert lazy.vector_reads.lazy is not None and lazy.vector_reads.mirror.size == 0
    assert full.vector_reads.lazy is None and full.vector_reads.mirror.size == 1200
    got = {memory_id for memory_id, _ in semantic(lazy, clustered(1, 22)[0])}
    assert got.isdisjoint({"m5", "m6"})
    lazy.close()
    full.close()


def test_lazy_index_follows_another_connections_writes(saved: Path, tmp_path: Path) -> None:
    store, other = opened(saved), opened(saved, lazy=False)
    query = clustered(1, seed=23)[0]
    semantic(store, query)
    assert store.vector_reads.lazy is not None
    fill(other, 1200, clustered(50, seed=24))  # new rows
    other.replace(memory(7), query)  # an update: m7 becomes the exact match
    other.forget(["m8", "m9"], hard=True, at=NOW)  # rows gone
    other.forget(["m10"], hard=False, at=NOW)
    found = semantic(store, query)
    assert found[0] == ("m7", pytest.approx(1.0, abs=1e-5))
    assert {"m8", "m9", "m10"}.isdisjoint(i for i, _ in found)
    assert store.vector_reads.lazy is not None and store.vector_reads.lazy.size == 1250 - 2
    check_against_table(store, tmp_path, clustered(1, seed=25)[0])
    assert store.vector_reads.mirror.size == 0  # still never loaded
    store.close()
    other.close()


def nearest_where(store: SQLiteStore, query: np.ndarray, limit: int, where: str
                  ) -> list[ChannelCandidate]:  # fmt: skip
    """The store's vector reader over the rows ``where`` admits (a filter no public
    request can state)."""
    scope = readers.Scope(lambda: store._db, where, [], store.tenancy.visible, spread=False)
    return store.vector_reads.window_semantic(NearestAsk(limit, query), scope)


def test_a_selective_filter_is_answered_exactly_from_the_table(saved: Path) -> None:
    store = opened(saved)
    with sqlite3.connect(saved) as db:
        truth = {memory_id: np.frombuffer(blob, np.float32) for memory_id, blob in db.execute(
            "SELECT m.id, v.vector FROM vectors v JOIN memories m ON m.pk = v.pk"
            " WHERE m.id IN ('m1', 'm2', 'm3', 'm40')")}  # fmt: skip
    query = clustered(1, seed=26)[0]
    found = nearest_where(store, query, 3, "m.id IN ('m1', 'm2', 'm3', 'm40')")
    want = sorted(truth, key=lambda i: -float(truth[i] @ query))[:3]
    assert [c.memory_id for c in found] == want
    assert store.vector_reads.lazy is not None and store.vector_reads.mirror.size == 0
    store.close()


def test_many_hidden_rows_still_give_the_mirrors_answers(saved: Path) -> None:
    store = opened(saved)
    query = clustered(1, seed=27)[0]
    semantic(store, query)
    store.forget([f"m{i}" for i in range(1, 1200, 3)], hard=False, at=NOW)  # a third hidden
    full = opened(saved, lazy=False)
    for query in clustered(5, seed=28):
        same(semantic(store, query), semantic(full, query))
    store.close()
    full.close()


def test_too_few_candidates_passing_falls_back_to_the_mirror(saved: Path) -> None:
    store = opened(saved)
    query = clustered(1, seed=31)[0]
    with sqlite3.connect(saved) as db:
        rows = list(db.execute("SELECT m.id, v.vector FROM vectors v JOIN memories m"
                               " ON m.pk = v.pk"))  # fmt: skip
    farthest = sorted(rows, key=lambda r: float(np.frombuffer(r[1], np.float32) @ query))[:60]
    names = ", ".join(f"'{r[0]}'" for r in farthest)
    found = nearest_where(store, query, 10, f"m.id IN ({names})")
    want = [r[0] for r in reversed(farthest)][:10]  # the best of the far ones
    assert [c.memory_id for c in found] == want
    assert (
        store.vector_reads.lazy is None and store.vector_reads.mirror.size == 1200
    )  # the mirror took over
    store.close()


def test_an_index_of_another_database_is_not_used(saved: Path, tmp_path: Path) -> None:
    other = tmp_path / "b.db"
    store = opened(other, lazy=False)
    fill(store, 0, clustered(1200, seed=29))
    store.close()
    (tmp_path / "b.db.ann").mkdir()
    for file in Path(f"{saved}.ann").glob("*.usearch"):
        (tmp_path / "b.db.ann" / file.name).write_bytes(file.read_bytes())
    store = opened(other)
    query = clustered(1, seed=30)[0]
    found = semantic(store, query)
    assert (
        store.vector_reads.lazy is None and store.vector_reads.mirror.size == 1200
    )  # rebuilt by the mirror
    with sqlite3.connect(other) as db:
        rows = list(db.execute("SELECT m.id, v.vector FROM vectors v JOIN memories m"
                               " ON m.pk = v.pk"))  # fmt: skip
    exact = sorted(rows, key=lambda r: -float(np.frombuffer(r[1], np.float32) @ query))
    assert len({i for i, _ in found} & {r[0] for r in exact[:10]}) >= 9
    store.close()


def test_a_query_of_another_dimension_is_refused(saved: Path) -> None:
    store = opened(saved)
    with pytest.raises(EmbedderMismatchError, match="dimensions"):
        semantic(store, np.ones(8, dtype=np.float32))
    store.close()


def test_memories_the_index_missed_that_other_channels_found_take_their_exact_places(
    saved: Path,
) -> None:
    """Vector completion (retrieval.candidates.complete_vectors): the store says its vector
    answer may be approximate; a nearest memory the ANN missed but the word channel found
    is put back where the exact search ranks it, with its exact cosine; nothing else moves."""
    from recalld.retrieval.candidates import complete_vectors
    from recalld.stores.base import SearchRows

    small = SQLiteStore(saved.parent / "small.db")
    assert small.exact_vectors()  # a store under the ANN size scores every vector
    small.close()
    store = opened(saved)
    query = clustered(1, seed=28)[0]
    exact = opened(saved, lazy=False)
    exact.search_exactly()
    truth = exact.candidates(CandidateRequest(asks={"semantic": NearestAsk(10, query)}))["semantic"]
    found = store.candidates(CandidateRequest(asks={"semantic": NearestAsk(10, query)}))["semantic"]
    assert not store.exact_vectors()  # the ANN index answered
    assert [c.memory_id for c in found] == [c.memory_id for c in truth]
    missed = truth[3]  # as if the index had not reached it
    ann = [c for c in truth if c is not missed] + [ChannelCandidate("m1199", 10, -1.0)]
    ann = [ChannelCandidate(c.memory_id, rank, c.score) for rank, c in enumerate(ann, start=1)]
    words = [ChannelCandidate(missed.memory_id, 1, 7.5), ChannelCandidate("m1198", 2, 3.0)]
    rows = SearchRows(({"semantic": ann, "bm25": words},), {})
    completed = complete_vectors(store, rows, query, 10).channels[0]
    assert completed["bm25"] == words
    got = completed["semantic"]
    assert [c.memory_id for c in got] == [c.memory_id for c in truth]
    assert [c.rank for c in got] == list(range(1, 11))
    assert [c.score for c in got] == pytest.approx([c.score for c in truth], abs=1e-6)
    # Nothing the other channels found is nearer than the last: the list stays as it was.
    other = next(f"m{i}" for i in range(1200) if f"m{i}" not in {c.memory_id for c in truth})
    far = SearchRows(({"semantic": truth, "bm25": [ChannelCandidate(other, 1, 2.0)]},), {})
    assert complete_vectors(store, far, query, 10).channels[0]["semantic"] == truth
    store.close()
    exact.close()


def test_a_wide_time_window_filters_the_index_candidates_not_every_row(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window keeping most rows is answered from the index's candidates, the window
    checked on them alone (a year of a 1M store is 500k rows to list); a window keeping few
    rows falls back to listing them. Both give the exact search's answer here."""
    from datetime import timedelta

    from recalld.records import TimeRange

    store, exact = opened(saved), opened(saved, lazy=False)
    exact.search_exactly()
    query = clustered(1, seed=29)[0]
    listed: list[str] = []
    nearest = VectorReads.nearest

    def spying(self: VectorReads, *args: object, **kwargs: object) -> object:
        listed.append("rows listed")
        return nearest(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(VectorReads, "nearest", spying)
    wide = TimeRange(NOW - timedelta(days=1), NOW + timedelta(days=1))
    request = CandidateRequest(asks={"window_semantic": NearestAsk(10, query, window=wide)})
    got = store.candidates(request)["window_semantic"]
    assert listed == [] and store.vector_reads.lazy is not None  # answered from the index alone
    want = exact.candidates(request)["window_semantic"]
    listed.clear()
    assert [c.memory_id for c in got] == [c.memory_id for c in want]
    assert [c.score for c in got] == pytest.approx([c.score for c in want], abs=1e-6)
    empty = TimeRange(NOW + timedelta(days=1), NOW + timedelta(days=2))
    emptied = CandidateRequest(asks={"window_semantic": NearestAsk(10, query, window=empty)})
    assert store.candidates(emptied)["window_semantic"] == []
    assert listed == ["rows listed"]  # too few candidates passed: the window's rows listed
    store.close()
    exact.close()


def test_a_window_holding_a_large_share_of_the_rows_is_checked_on_the_index_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window the exact path could list, but holding a share of the rows large enough for
    the index's candidates to find its nearest (half of them here, as a year of a 100k
    store), is answered from the candidates, the exact answer here; a window holding fewer
    rows than the candidates could find is listed."""
    from datetime import timedelta

    from recalld.records import TimeRange

    store, exact = dated_stores(tmp_path)
    listed: list[str] = []
    nearest = VectorReads.nearest

    def spying(self: VectorReads, *args: object, **kwargs: object) -> object:
        listed.append(self is store.vector_reads)
        return nearest(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(VectorReads, "nearest", spying)
    half = TimeRange(NOW - timedelta(hours=599, minutes=30), NOW + timedelta(minutes=1))
    query = clustered(1, seed=37)[0]
    request = CandidateRequest(asks={"window_semantic": NearestAsk(10, query, window=half)})
    store.candidates(CandidateRequest(asks={"semantic": NearestAsk(10, query)}))  # index opened
    assert (
        store.vector_reads.lazy is not None
        and store.vector_reads.lazy.passing_rows(10 + 16) < 600 < 1000
    )
    listed.clear()
    got = store.candidates(request)["window_semantic"]
    assert listed == []  # answered from the index's candidates alone
    want = exact.candidates(request)["window_semantic"]
    assert [c.memory_id for c in got] == [c.memory_id for c in want]
    assert {int(c.memory_id[1:]) for c in got} <= set(range(600))
    listed.clear()
    few = TimeRange(NOW - timedelta(hours=9, minutes=30), NOW + timedelta(minutes=1))
    narrowed = CandidateRequest(asks={"window_semantic": NearestAsk(10, query, window=few)})
    got = store.candidates(narrowed)["window_semantic"]
    assert listed == [True] and {int(c.memory_id[1:]) for c in got} == set(range(10))
    store.close()
    exact.close()


def test_a_wider_search_of_a_window_reads_only_the_candidates_it_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window holding too small a share of the rows for the index's first candidates
    asks for more; the wider search reads from the table only the candidates the first did
    not (a year of a 100k store, just under half its rows, asked twice), and answers as
    exact search does."""
    from datetime import timedelta

    from recalld.records import TimeRange
    from recalld.stores.sqlite import lazy_vectors

    store, exact = dated_stores(tmp_path)
    query = clustered(1, seed=37)[0]
    store.candidates(CandidateRequest(asks={"semantic": NearestAsk(10, query)}))  # index opened
    read: list[list[int]] = []
    reading = lazy_vectors._read

    def spying(db: sqlite3.Connection, sql: str, params: list[object], pks: Any) -> list[Any]:
        if "NOT INDEXED" in sql:  # the filter checked on the index's candidates
            read.append([int(p) for p in pks])
        return reading(db, sql, params, pks)

    monkeypatch.setattr(lazy_vectors, "_read", spying)
    third = TimeRange(NOW - timedelta(hours=359, minutes=30), NOW + timedelta(minutes=1))
    request = CandidateRequest(asks={"window_semantic": NearestAsk(10, query, window=third)})
    got = store.candidates(request)["window_semantic"]
    assert len(read) == 2 and read[0] and read[1]  # a first search, then a wider one
    assert not set(read[0]) & set(read[1])
    want = exact.candidates(request)["window_semantic"]
    assert [c.memory_id for c in got] == [c.memory_id for c in want]
    assert [c.score for c in got] == pytest.approx([c.score for c in want], abs=1e-6)
    store.close()
    exact.close()


def test_a_large_filtered_subset_reads_back_only_its_nearest_by_the_index_copies(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subset searched exactly but much larger than the rows asked for is ranked first by
    the index's int8 copies; only the best of them are scored, from the vectors file, and
    the answer is still the exact one (a month of a 1M store: 42k rows read, then 900; now
    none: the vectors file holds their ids too)."""
    from recalld.stores.sqlite import lazy_vectors

    store = SQLiteStore(saved)
    store.vector_reads.mirror = VectorMirror(
        Path(f"{saved}.ann"), ann_min_rows=100, subset_exact_rows=1000, build_threads=1
    )
    with sqlite3.connect(saved) as db:
        rows = list(db.execute("SELECT m.id, v.vector FROM vectors v JOIN memories m"
                               " ON m.pk = v.pk WHERE m.pk % 2 = 0"))  # fmt: skip
    semantic(store, clustered(1, seed=33)[0])  # the index opened (and spot-checked)
    read: list[int] = []
    reading = lazy_vectors._read

    def counting(db: sqlite3.Connection, sql: str, params: list[object], pks: object) -> object:
        read.append(len(pks))  # type: ignore[arg-type]
        return reading(db, sql, params, pks)  # type: ignore[arg-type]

    monkeypatch.setattr(lazy_vectors, "_read", counting)
    keep = np.array([pk for pk in range(1, 1201) if pk % 2 == 0], np.int64)
    for query in clustered(5, seed=32):
        read.clear()
        found = store.vector_reads.nearest(query, 10, None, keep)  # a filter's rows, listed
        exact = sorted(rows, key=lambda r: -float(np.frombuffer(r[1], np.float32) @ query))
        assert [c.memory_id for c in found] == [r[0] for r in exact[:10]]
        assert read == [] and len(rows) == 600  # scored, and named, from the vectors file
    assert store.vector_reads.lazy is not None and store.vector_reads.mirror.size == 0
    # A row the index holds no copy of (written since it caught up) is read back as it is.
    chosen = store.vector_reads.lazy._preselected(
        np.append(keep, 999_999), clustered(1, seed=34)[0], 26
    )
    assert 999_999 in chosen and len(chosen) == lazy_vectors.PRESELECT_FACTOR * 26 + 1
    store.close()


def test_the_index_copies_read_and_scored_by_blocks_are_the_same(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index's copies read through usearch's compiled lookup are those its public
    ``get`` gives (and without that lookup, ``get`` is used); scored a few rows at a time
    they score exactly as all at once."""
    from recalld.stores.sqlite import copy_file

    store = SQLiteStore(saved)
    store.vector_reads.mirror = VectorMirror(
        Path(f"{saved}.ann"), ann_min_rows=100, subset_exact_rows=1000, build_threads=1
    )
    semantic(store, clustered(1, seed=33)[0])  # the index opened
    assert store.vector_reads.lazy is not None
    ann = store.vector_reads.lazy.ann
    keys = np.array([3, 1, 999_999, 1200, 17], np.int64)
    public = ann._index.get(keys.astype(np.uint64))

    def as_bytes(copies: Sequence[Any]) -> list[bytes | None]:
        return [None if c is None else bytes(c) for c in copies]

    assert as_bytes(ann.copies(keys)) == as_bytes(public) and public[2] is None
    compiled = ann._index

    class PublicOnly:  # a usearch without the compiled lookup
        dtype = compiled.dtype

        def get(self, keys: Any) -> Any:
            return compiled.get(keys)

    monkeypatch.setattr(ann, "_index", PublicOnly())
    assert as_bytes(ann.copies(keys)) == as_bytes(public)
    monkeypatch.setattr(ann, "_index", compiled)
    copies = ann.copies(np.arange(1, 1201, dtype=np.int64))
    matrix = np.frombuffer(b"".join(copies), dtype=copies[0].dtype).reshape(1200, -1)
    query = clustered(1, seed=35)[0]
    whole = matrix.astype(np.float32)
    want = (whole @ query) / np.maximum(np.sqrt(np.einsum("ij,ij->i", whole, whole)), 1e-12)
    monkeypatch.setattr(copy_file, "COPY_BLOCK", 7)
    norms = copy_file.copy_norms(matrix)
    got = copy_file.copy_cosines(matrix, query, norms)
    assert got.shape == (1200,) and np.allclose(got, want, atol=1e-6)
    monkeypatch.setattr(copy_file, "COPY_BLOCK", 4096)
    assert np.array_equal(copy_file.copy_norms(matrix), norms)
    assert np.array_equal(copy_file.copy_cosines(matrix, query, norms), got)
    store.close()


def test_a_search_from_a_stored_vector_caps_the_beam(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memories near a memory (the query is its own stored vector) are searched with the
    beam capped at NEAR_MEMORY_EXPANSION, whatever the index's size; a query's beam is
    not; both find the exact nearest here."""
    from recalld.stores.sqlite import ann_beam

    monkeypatch.setattr(ann_beam, "NEAR_MEMORY_EXPANSION", 80)
    store, exact = opened(saved), opened(saved, lazy=False)
    exact.search_exactly()
    stored = store.vectors_for(["m17"])["m17"]
    asked = ann_beam.SMALL_PER_CANDIDATE * 2 * (10 + 16)  # a small index: no growth
    assert asked > 80
    for near_memory, beam in ((False, asked), (True, 80)):
        request = CandidateRequest(
            asks={"semantic": NearestAsk(10, stored, near_memory=near_memory)}
        )
        found = store.candidates(request)["semantic"]
        assert store.vector_reads.lazy is not None
        assert store.vector_reads.lazy.ann._index.expansion_search == beam
        want = exact.candidates(request)["semantic"]
        assert [c.memory_id for c in found] == [c.memory_id for c in want]
        assert found[0].memory_id == "m17"
    store.close()
    exact.close()
