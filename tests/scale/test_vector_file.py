"""The ANN index's vectors kept in a mapped file beside it (vector_file): a search re-scores
the index's candidates from it, never reading their vectors from the table, and stays exact
under writes, across processes, and with the file missing or not this store's."""

from __future__ import annotations

import multiprocessing
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

from recalld.records import MemoryFilter
from recalld.stores.base import CandidateRequest, NearestAsk
from recalld.stores.sqlite import SQLiteStore, lazy_vectors, vector_file, vector_index

pytest.importorskip("onnxruntime")  # see vector_index._usearch_index: load it first
pytest.importorskip("usearch")

from test_lazy_vectors import opened, same, semantic  # noqa: E402
from test_vector_mirror import NOW, clustered, fill, memory  # noqa: E402


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """1,200 memories, their saved index and its vectors file (a first process's search)."""
    path = tmp_path / "m.db"
    first = opened(path, lazy=False)
    fill(first, 0, clustered(1200, seed=41))
    first.candidates(CandidateRequest(asks={"semantic": NearestAsk(5, clustered(1, 1)[0])}))
    first.close()
    return path


def files(path: Path, pattern: str) -> list[Path]:
    return sorted(Path(f"{path}.ann").glob(pattern))


def vector_reads(monkeypatch: pytest.MonkeyPatch, every: bool = False) -> list[str]:
    """Every statement of the lazy index that reads vectors from the table (``every``: or
    anything by pk), as it runs."""
    seen: list[str] = []
    reading = lazy_vectors._read

    def counting(db: sqlite3.Connection, sql: str, params: list[object], pks: object) -> object:
        if every or "vector" in sql:
            seen.append(sql)
        return reading(db, sql, params, pks)  # type: ignore[arg-type]

    monkeypatch.setattr(lazy_vectors, "_read", counting)
    return seen


def exact_answer(path: Path, query: np.ndarray, **filters: object) -> list[tuple[str, float]]:
    """The truth: every visible vector of the table scored."""
    store = opened(path, lazy=False)
    store.search_exactly()
    found = semantic(store, query, **filters)
    store.close()
    return found


def test_the_vectors_file_is_written_with_the_index_private(saved: Path) -> None:
    (index,) = files(saved, "*.usearch")
    (vectors,) = files(saved, "*.vectors")
    assert vectors.stem == index.name.split(".")[0]  # the same seq as the index
    for made in (index, vectors):
        assert stat.S_IMODE(made.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(f"{saved}.ann").stat().st_mode) & 0o077 == 0
    copies = vector_file.VectorCopies.open(vectors.parent, int(vectors.stem), 24)
    assert copies is not None and len(copies) == 1200
    with sqlite3.connect(saved) as db:
        table = dict(db.execute("SELECT pk, vector FROM vectors"))
        names = dict(db.execute("SELECT pk, id FROM memories"))
    pks = np.array(sorted(table), dtype=np.int64)
    found, _, got, ids = copies.lookup_ids(pks)
    assert found.all()
    assert all(got[i].tobytes() == table[int(pk)] for i, pk in enumerate(pks))  # bit for bit
    assert ids == [names[int(pk)] for pk in pks]


def test_a_search_rescores_from_the_file_and_reads_nothing_from_the_table(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = opened(saved)
    semantic(store, clustered(1, 42)[0])  # the index opened (its spot check reads the table)
    assert store.vector_reads.lazy is not None and store.vector_reads.lazy.copies is not None
    reads = vector_reads(monkeypatch, every=True)
    store.forget(["m3", "m4"], hard=False, at=NOW)
    for query in clustered(10, seed=43):
        same(semantic(store, query), exact_answer(saved, query))
        same(semantic(store, query, session_id="s2"), exact_answer(saved, query, session_id="s2"))
    assert reads == []
    assert store.vector_reads.mirror.size == 0
    store.close()


@pytest.mark.parametrize("left", ["no file", "an older file"])
def test_without_its_file_an_index_reads_the_table_as_before(
    saved: Path, monkeypatch: pytest.MonkeyPatch, left: str
) -> None:
    """An index saved by an earlier recalld (no vectors file, or one of an older layout) is
    searched as it was, the candidates' vectors read from the table; a process that loads
    every vector then writes the file, and the next process uses it."""
    for path in files(saved, "*.vectors"):
        if left == "no file":
            path.unlink()
        else:
            older = bytearray(path.read_bytes())
            older[8:12] = (1).to_bytes(4, "little")  # the version
            path.write_bytes(bytes(older))
    store = opened(saved)
    reads = vector_reads(monkeypatch)
    for query in clustered(5, seed=44):
        same(semantic(store, query), exact_answer(saved, query))
    assert store.vector_reads.lazy is not None and store.vector_reads.lazy.copies is None and reads
    store.close()
    full = opened(saved, lazy=False)
    semantic(full, clustered(1, 45)[0])
    full.close()
    (index,) = files(saved, "*.usearch")
    assert [p.stem for p in files(saved, "*.vectors")] == [index.name.split(".")[0]]
    again = opened(saved)
    semantic(again, clustered(1, 46)[0])
    assert again.vector_reads.lazy is not None and again.vector_reads.lazy.copies is not None
    again.close()


def test_a_file_that_disagrees_with_the_table_is_not_used(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vectors that are not the table's (a file of another store, or damaged) are set aside
    after the spot check, and the answers stay exact."""
    (vectors,) = files(saved, "*.vectors")
    data = bytearray(vectors.read_bytes())
    start = vector_file.HEADER_BYTES + 16 * 1200
    noise = clustered(1200, seed=47).astype("<f4").tobytes()
    data[start : start + len(noise)] = noise
    vectors.write_bytes(bytes(data))
    store = opened(saved)
    for query in clustered(5, seed=48):
        same(semantic(store, query), exact_answer(saved, query))
    assert store.vector_reads.lazy is not None and store.vector_reads.lazy.copies is None
    store.close()
    vectors.write_bytes(bytes(data[:-4]))  # cut short: refused by its size
    assert vector_file.VectorCopies.open(vectors.parent, int(vectors.stem), 24) is None


def test_writes_of_another_process_are_followed_and_saved(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New, updated, soft- and hard-forgotten rows written by another process: the open
    index follows them exactly (the changed rows kept in memory over the file); once enough
    changed for the index to be saved, a new vectors file goes with it, and a new process
    opening that file answers the same."""
    monkeypatch.setattr(vector_index, "SAVE_FRACTION", 0.01)
    store = opened(saved)
    query = clustered(1, seed=49)[0]
    semantic(store, query)
    first_file = files(saved, "*.vectors")
    reads = vector_reads(monkeypatch, every=True)
    context = multiprocessing.get_context("spawn")
    writer = context.Process(target=_write_elsewhere, args=(str(saved), query))
    writer.start()
    writer.join(120)
    assert writer.exitcode == 0
    found = semantic(store, query)
    assert found[0] == ("m7", pytest.approx(1.0, abs=1e-5))  # updated to the query itself
    assert {"m8", "m9", "m10"}.isdisjoint(i for i, _ in found)
    for probe in [query, *clustered(6, seed=50)]:
        same(semantic(store, probe), exact_answer(saved, probe))
        same(semantic(store, probe, session_id="s1"),
             exact_answer(saved, probe, session_id="s1"))  # fmt: skip
    lazy = store.vector_reads.lazy
    assert lazy is not None and lazy.copies is not None and lazy.size == 1200 + 30 - 2
    assert reads == [] and store.vector_reads.mirror.size == 0
    assert files(saved, "*.vectors") != first_file  # saved again, with the index
    (index,) = files(saved, "*.usearch")
    (vectors,) = files(saved, "*.vectors")
    assert vectors.stem == index.name.split(".")[0]
    assert stat.S_IMODE(vectors.stat().st_mode) == 0o600
    fresh = opened(saved)
    for probe in clustered(6, seed=50):
        same(semantic(fresh, probe), exact_answer(saved, probe))
    assert fresh.vector_reads.lazy is not None and fresh.vector_reads.lazy.copies is not None
    fresh.close()
    store.close()


def _write_elsewhere(path: str, query: np.ndarray) -> None:
    other = SQLiteStore(path)
    fill(other, 1200, clustered(30, seed=51))
    other.replace(memory(7), query)
    other.forget(["m8", "m9"], hard=True, at=NOW)
    other.forget(["m10"], hard=False, at=NOW)
    other.close()


def test_a_filtered_row_the_file_lacks_is_read_from_the_table(saved: Path) -> None:
    """A row written after the index caught up is not in the file: a filter that keeps it
    still scores it, from the table."""
    store = opened(saved)
    semantic(store, clustered(1, 52)[0])
    lazy = store.vector_reads.lazy
    assert lazy is not None and lazy.copies is not None
    query = clustered(1, seed=53)[0]
    other = SQLiteStore(saved)
    other.insert([memory(5000, "s9")], query[None, :])
    other.close()
    keep = np.array([5000 + 1, 1, 2, 3], dtype=np.int64)  # pks: the new row is pk 1201
    with sqlite3.connect(saved) as db:
        (new_pk,) = db.execute("SELECT pk FROM memories WHERE id = 'm5000'").fetchone()
    keep[0] = new_pk
    found = lazy._exact_subset(store._db, keep, query, 3)
    assert found[0] == ("m5000", pytest.approx(1.0, abs=1e-5))
    store.close()


def test_copies_follow_changes_over_the_file(tmp_path: Path) -> None:
    """The overlay: a changed row answers its new vector, a removed one none, the others the
    file's; written again, the file holds exactly that."""
    vectors = clustered(50, seed=54)
    pks = np.arange(1, 51, dtype=np.int64) * 2
    seqs = np.arange(1, 51, dtype=np.int64)
    names = [f"m{pk}-é" for pk in pks]  # any UTF-8
    chunks = [(pks[:20], seqs[:20], vectors[:20], names[:20]),
              (pks[20:], seqs[20:], vectors[20:], names[20:])]  # fmt: skip
    path = vector_file.write(tmp_path, 50, 24, lambda: (50, iter(chunks)))
    assert path.name == "50.vectors" and stat.S_IMODE(path.stat().st_mode) == 0o600
    copies = vector_file.VectorCopies.open(tmp_path, 50, 24)
    assert copies is not None and vector_file.VectorCopies.open(tmp_path, 49, 24) is None
    new = clustered(3, seed=55)
    copies.apply(np.array([4, 6]), np.array([8, 7, 4]), np.array([51, 52, 53]), new,
                 ["new8", "new7", "new4"])  # fmt: skip
    found, got_seqs, got, ids = copies.lookup_ids(np.array([2, 4, 6, 7, 8, 9]))
    assert found.tolist() == [True, True, False, True, True, False]
    assert ids == ["m2-é", "new4", "", "new7", "new8", ""]
    assert got_seqs.tolist() == [1, 53, 0, 52, 51, 0]
    assert np.array_equal(got[[0, 1, 3, 4]], np.vstack([vectors[0], new[2], new[1], new[0]]))
    assert len(copies) == 50 - 1 + 1
    vector_file.write(tmp_path, 53, 24, copies.rows)
    again = vector_file.VectorCopies.open(tmp_path, 53, 24)
    assert again is not None and len(again) == 50
    every = np.array(sorted({*pks.tolist(), 7} - {6}), dtype=np.int64)
    assert np.array_equal(again.lookup(every)[2], copies.lookup(every)[2])
    assert again.lookup_ids(every)[3] == copies.lookup_ids(every)[3]


def test_a_filtered_search_reads_nothing_by_pk(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = opened(saved)
    semantic(store, clustered(1, 56)[0])
    reads = vector_reads(monkeypatch, every=True)
    request = CandidateRequest(
        filters=MemoryFilter(session_id="s3"),
        asks={"semantic": NearestAsk(10, clustered(1, 57)[0])},
    )
    got = [(c.memory_id, c.score) for c in store.candidates(request)["semantic"]]
    same(got, exact_answer(saved, clustered(1, 57)[0], session_id="s3"))
    assert reads == []
    store.close()


def test_the_vectors_a_search_compares_come_from_the_file(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``vectors_for`` (vector completion, knowledge updates, diversity) answers from the
    file what the table would, bit for bit, ids turned into pks on the index alone; a row
    the file lacks (written since the catch-up) and an unknown id are the table's answer."""
    store = opened(saved)
    semantic(store, clustered(1, 58)[0])
    assert store.vector_reads.lazy is not None and store.vector_reads.lazy.copies is not None
    other = SQLiteStore(saved)
    other.insert([memory(6000, "s9")], clustered(1, seed=59))
    other.close()
    asked = [f"m{i}" for i in range(0, 1200, 37)] + ["m6000", "nope"]
    truth = opened(saved, lazy=False)
    truth.search_exactly()
    want = truth.vectors_for(asked)
    truth.close()
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)  # each statement, its parameters bound
    got = store.vectors_for(asked)
    store._db.set_trace_callback(None)
    assert sorted(got) == sorted(want) and "nope" not in got and "m6000" in got
    assert all(got[i].tobytes() == want[i].tobytes() for i in want)
    vector_sql = [sql for sql in seen if "v.vector" in sql]
    assert len(vector_sql) == 1 and "'m6000'" in vector_sql[0] and "'m37'" not in vector_sql[0]
    store.close()
