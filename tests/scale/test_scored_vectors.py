"""The vectors a search scored are handed on, not read again by id: the vector channels'
(``search_rows(vectors=True)``) and vector completion's; bit for bit what a read by id
gives. And the vectors file answers a lookup of rows it all holds as the general path does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recalld.stores.asks import ChannelCandidate
from recalld.stores.base import CandidateRequest, NearestAsk, SearchRows, WordsAsk
from recalld.stores.sqlite import vector_file

pytest.importorskip("onnxruntime")  # see vector_index._usearch_index: load it first
pytest.importorskip("usearch")

from test_lazy_vectors import opened, saved  # noqa: E402, F401
from test_vector_mirror import clustered, fill  # noqa: E402


def truth(path: Path, ids: list[str]) -> dict[str, np.ndarray]:
    """The vectors of ``ids`` read from the table by id."""
    store = opened(path, lazy=False)
    store.search_exactly()
    found = store.vectors_for(ids)
    store.close()
    return found


@pytest.mark.parametrize("lazy", [True, False])
def test_a_search_hands_on_the_vectors_it_scored(saved: Path, lazy: bool) -> None:  # noqa: F811
    """From the ANN index's vectors file (``lazy``) or the mirror: the vectors of exactly the
    memories the channel returns, the very floats a read by id gives; none unless asked."""
    store = opened(saved, lazy=lazy)
    query = clustered(1, seed=61)[0]
    request = CandidateRequest(asks={"semantic": NearestAsk(12, query)})
    assert store.search_rows([request]).vectors == {}
    rows = store.search_rows([request], vectors=True)
    assert (store.vector_reads.lazy is not None) == lazy
    ids = [c.memory_id for c in rows.channels[0]["semantic"]]
    assert len(ids) == 12 and sorted(rows.vectors) == sorted(ids)
    want = truth(saved, ids)
    assert all(rows.vectors[i].tobytes() == want[i].tobytes() for i in ids)
    # Two requests in one call: the vectors of both channels' answers.
    other = CandidateRequest(asks={"semantic": NearestAsk(5, clustered(1, seed=62)[0])})
    both = store.search_rows([request, other], vectors=True)
    assert sorted(both.vectors) == sorted(both.candidate_ids)
    store.close()


def test_completion_keeps_the_vectors_it_read(saved: Path) -> None:  # noqa: F811
    """Vector completion reads the other channels' candidates' vectors to score them; they
    stay with the rows, so the later stages (knowledge updates, diversity) do not read
    them again."""
    from recalld.retrieval.candidates import complete_vectors

    store = opened(saved)
    query = clustered(1, seed=63)[0]
    near = store.candidates(CandidateRequest(asks={"semantic": NearestAsk(10, query)}))
    assert not store.exact_vectors()
    listed = {c.memory_id for c in near["semantic"]}
    others = [f"m{i}" for i in range(0, 1200, 97) if f"m{i}" not in listed][:6]
    words = [ChannelCandidate(i, rank, 1.0) for rank, i in enumerate(others, start=1)]
    rows = SearchRows(({**near, "bm25": words},), {})
    completed = complete_vectors(store, rows, query, 10)
    assert sorted(completed.vectors) == sorted(others)
    want = truth(saved, others)
    assert all(completed.vectors[i].tobytes() == want[i].tobytes() for i in others)
    store.close()


def test_a_lookup_of_held_rows_equals_the_general_path(tmp_path: Path) -> None:
    """Rows the file all holds are gathered at once: the same seqs, vectors and ids as a
    lookup that also asks for a row it lacks (the general path), bit for bit."""
    vectors = clustered(300, seed=64)
    pks = np.arange(1, 301, dtype=np.int64) * 3
    seqs = np.arange(1, 301, dtype=np.int64) + 1000
    names = [f"m{pk}-é" for pk in pks]
    vector_file.write(tmp_path, 300, 24, lambda: (300, iter([(pks, seqs, vectors, names)])))
    copies = vector_file.VectorCopies.open(tmp_path, 300, 24)
    assert copies is not None
    asked = np.random.default_rng(65).choice(pks, 120)  # unsorted, with repeats
    found, got_seqs, got, ids = copies.lookup_ids(asked)
    general = copies.lookup_ids(np.concatenate([asked, [2]]))  # pk 2 is not held
    assert found.all() and not general[0][-1]
    assert np.array_equal(got_seqs, general[1][:-1]) and got.tobytes() == general[2][:-1].tobytes()
    assert ids == general[3][:-1] == [f"m{pk}-é" for pk in asked.tolist()]
    rows = (asked // 3 - 1).tolist()
    assert got.tobytes() == vectors[rows].tobytes() and got_seqs.tolist() == seqs[rows].tolist()
    assert copies.lookup(asked)[2].tobytes() == got.tobytes()


def test_the_word_channels_rows_read_their_vectors_without_the_id_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The word index's winners are found by pk: the search notes each one's pk, and vector
    completion's read of their vectors goes by pk to the vectors file, not through the
    ``(namespace, id)`` index; the same floats. Outside a search every id is looked up."""
    pytest.importorskip("tantivy")
    from recalld.stores.sqlite import word_index

    monkeypatch.setattr(word_index, "WORD_INDEX_MIN_ROWS", 100)
    path = tmp_path / "w.db"
    first = opened(path, lazy=False)
    fill(first, 0, clustered(1200, seed=66))  # past both thresholds: the word index is built
    first.candidates(CandidateRequest(asks={"semantic": NearestAsk(5, clustered(1, 1)[0])}))
    first.close()
    store = opened(path)
    query = clustered(1, seed=67)[0]
    request = CandidateRequest(
        asks={"semantic": NearestAsk(10, query), "bm25": WordsAsk(30, ("number",))}
    )
    rows = store.search_rows([request], vectors=True)
    assert isinstance(store.vector_reads.word_engines[0], word_index.TantivyWords)
    words = [c.memory_id for c in rows.channels[0]["bm25"]]
    others = [i for i in words if i not in rows.vectors]
    assert len(others) >= 20
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    got = store.vectors_for(others)
    store._db.set_trace_callback(None)
    assert [sql for sql in seen if "m.pk FROM memories" in sql] == []
    want = truth(path, others)
    assert sorted(got) == sorted(others)
    assert all(got[i].tobytes() == want[i].tobytes() for i in others)
    # A read by id outside a search's readers (another store handle) looks every id up.
    plain = opened(path)
    plain.search_rows([CandidateRequest(asks={"semantic": NearestAsk(3, query)})])
    plain._db.set_trace_callback(seen.append)
    again = plain.vectors_for(others)
    plain._db.set_trace_callback(None)
    assert [sql for sql in seen if "m.pk FROM memories" in sql]
    assert all(again[i].tobytes() == want[i].tobytes() for i in others)
    # A later search on the same handle that keeps no vectors forgets the pks noted: no
    # read after it goes by another search's pks.
    store.search_rows([CandidateRequest(asks={"semantic": NearestAsk(3, query)})])
    seen.clear()
    store._db.set_trace_callback(seen.append)
    later = store.vectors_for(others)
    store._db.set_trace_callback(None)
    assert [sql for sql in seen if "m.pk FROM memories" in sql]
    assert all(later[i].tobytes() == want[i].tobytes() for i in others)
    store.close()
    plain.close()
