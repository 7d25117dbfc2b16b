"""A mapped ANN index moves its graph into huge pages once the process keeps searching
(ann_memory), with the same answers; a process that searches once leaves the file mapped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recalld.stores.sqlite import ann_memory

pytest.importorskip("onnxruntime")  # see vector_index._usearch_index: load it first
pytest.importorskip("usearch")

from test_lazy_vectors import opened, save_index, semantic  # noqa: E402
from test_vector_mirror import clustered  # noqa: E402


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return save_index(tmp_path / "m.db")


def huge_pages_here() -> bool:
    return ann_memory._huge_pages_advisable()


def test_a_searching_process_views_the_graph_from_huge_pages_with_the_same_answers(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ann_memory, "MIN_BYTES", 0)  # the test's index is small
    store, exact = opened(saved), opened(saved, lazy=False)
    exact.search_exactly()
    queries = clustered(ann_memory.WALKS_BEFORE_COPY + 6, seed=31)
    before = [semantic(store, q) for q in queries]
    lazy = store.vector_reads.lazy
    assert lazy is not None
    ann = lazy.ann
    assert ann.is_view and ann.copying is not None
    ann.copying.join(timeout=60)
    if not huge_pages_here():
        pytest.skip("no transparent huge pages on this system")
    assert ann.huge_copy is not None and ann.huge_copy.advised()
    assert ann.view_of is not None
    assert bytes(ann.huge_copy.view) == ann.view_of.path.read_bytes()
    ann._last = None
    after = [semantic(store, q) for q in queries]
    assert after == before  # the same graph: the same candidates, the same exact scores
    for query, got in zip(queries, after, strict=True):
        assert [i for i, _ in got] == [i for i, _ in semantic(exact, query)]
    store.close()
    exact.close()


def test_a_process_that_searches_once_reads_no_copy(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ann_memory, "MIN_BYTES", 0)
    store = opened(saved)
    semantic(store, clustered(1, seed=32)[0])
    lazy = store.vector_reads.lazy
    assert lazy is not None and lazy.ann.is_view
    assert lazy.ann.copying is None and lazy.ann.huge_copy is None
    store.close()


def test_a_small_file_stays_mapped(saved: Path) -> None:
    index_file = ann_memory.SavedFile.of(next(Path(f"{saved}.ann").glob("*.usearch")))
    assert index_file is not None and index_file.stamp[2] < ann_memory.MIN_BYTES
    assert ann_memory.huge_copy(index_file) is None


def test_a_file_saved_again_under_the_same_name_is_not_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's save replaces the file the view maps: the copy would be another
    graph than the one mapped, so none is made."""
    monkeypatch.setattr(ann_memory, "MIN_BYTES", 0)
    path = tmp_path / "1.b384.usearch"
    path.write_bytes(b"a" * (3 << 20))
    mapped = ann_memory.SavedFile.of(path)
    assert mapped is not None
    replacement = tmp_path / "new"
    replacement.write_bytes(b"b" * (3 << 20))
    replacement.replace(path)
    assert ann_memory.huge_copy(mapped) is None
    again = ann_memory.SavedFile.of(path)
    assert again is not None
    if ann_memory._huge_pages_advisable():
        copy = ann_memory.huge_copy(again)
        assert copy is not None and bytes(copy.view) == b"b" * (3 << 20)


def test_a_copy_holds_the_file_and_is_advised_for_huge_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ann_memory, "MIN_BYTES", 0)
    path = tmp_path / "bytes"
    data = np.random.default_rng(3).integers(0, 255, 3 << 20, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    saved_file = ann_memory.SavedFile.of(path)
    assert saved_file is not None
    copy = ann_memory.huge_copy(saved_file)
    if not huge_pages_here():
        assert copy is None
        return
    assert copy is not None and len(copy) == len(data)
    assert bytes(copy.view) == data and copy.advised()
    monkeypatch.setattr(ann_memory, "SPARE_FACTOR", 10**9)  # more than any machine has
    assert ann_memory.huge_copy(saved_file) is None


def test_a_view_of_unit_vectors_walks_by_inner_product_with_the_exact_answers(
    saved: Path,
) -> None:
    store, exact = opened(saved), opened(saved, lazy=False)
    exact.search_exactly()
    queries = clustered(12, seed=33)
    for query in queries:
        got, want = semantic(store, query), semantic(exact, query)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
    lazy = store.vector_reads.lazy
    assert lazy is not None and lazy.ann.is_view and lazy.ann.by_product
    store.close()
    exact.close()


def test_a_view_saved_without_its_copies_file_keeps_the_cosine_walk(saved: Path) -> None:
    """An index saved by an earlier recalld (no copies file beside it: no norms to check)
    walks by cosine; its copies file is written for the next process."""
    folder = Path(f"{saved}.ann")
    for copies in folder.glob("*.copies"):
        copies.unlink()
    store, exact = opened(saved), opened(saved, lazy=False)
    exact.search_exactly()
    for query in clustered(8, seed=36):
        got, want = semantic(store, query), semantic(exact, query)
        assert [i for i, _ in got] == [i for i, _ in want]
    lazy = store.vector_reads.lazy
    assert lazy is not None and lazy.ann.is_view and not lazy.ann.by_product
    assert list(folder.glob("*.copies"))
    store.close()
    exact.close()
    again = opened(saved)
    semantic(again, clustered(1, seed=37)[0])
    assert again.vector_reads.lazy is not None and again.vector_reads.lazy.ann.by_product
    again.close()
