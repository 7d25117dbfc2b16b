"""The word index beside a large store (tantivy over FTS5's tokens): it answers the word
channel past its size threshold (lowered here) with FTS5's rows, order and scores, follows
every write (from other handles too), and stands aside for FTS5 whenever it cannot answer at
once: missing, another store's, far behind."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from recalld.records import Memory, MemoryFilter
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest, Tenancy
from recalld.stores.sqlite import SQLiteStore, word_index
from recalld.text import content_hash

pytest.importorskip("tantivy")

NOW = datetime(2026, 11, 1, tzinfo=UTC)
WORDS = ("kayak", "river", "trip", "club", "meeting", "lisbon", "sister", "dinner", "deploy",
         "bugs", "fixing", "tea", "garden", "running", "runners", "the", "of")  # fmt: skip
QUERIES = (("kayak",), ("lisbon", "sister"), ("the", "river", "bugs"), ("absent",),
           ("tea", "of"), ("river trip",), ("running",), ("fix",), ("café",))  # fmt: skip


def memory(i: int, text: str, **fields: Any) -> Memory:
    return Memory(id=f"m{i:05d}", content=text, content_hash=content_hash(text), type="fact",
                  created_at=NOW, updated_at=NOW, **fields)  # fmt: skip


def corpus(count: int, seed: int = 7) -> list[Memory]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        words = rng.choices(WORDS, k=rng.randint(2, 9))
        if i % 50 == 0:
            words.append("Café")  # folded like FTS5 folds it (remove_diacritics 2)
        out.append(memory(i, " ".join(words), project="rare" if i % 40 == 0 else None))
    return out


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(word_index, "WORD_INDEX_MIN_ROWS", 100)


sync = word_index.WordIndex.sync


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.insert(corpus(600), None)  # past the threshold: this write builds the index
    store.close()
    yield path


def bm25(store: SQLiteStore, terms: tuple[str, ...], limit: int = 1000,
         filters: MemoryFilter | None = None) -> list[tuple[str, float]]:  # fmt: skip
    found = store.candidates(
        CandidateRequest(filters=filters or MemoryFilter(), asks={"bm25": WordsAsk(limit, terms)})
    )
    return [(c.memory_id, c.score) for c in found.get("bm25", [])]


def fts5(store: SQLiteStore, terms: tuple[str, ...], limit: int = 1000,
         filters: MemoryFilter | None = None) -> list[tuple[str, float]]:  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(word_index, "WORD_INDEX_MIN_ROWS", 10**9)
        return bm25(store, terms, limit, filters)


def ids(found: list[tuple[str, float]]) -> list[str]:
    return [i for i, _ in found]


def answered_by_index(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records, per word search, whether the index answered (True) or stood aside."""
    answers: list[bool] = []
    top = word_index.WordIndex.top

    def recording(self: word_index.WordIndex, *args: Any) -> Any:
        found = top(self, *args)
        answers.append(found is not None)
        return found

    monkeypatch.setattr(word_index.WordIndex, "top", recording)
    return answers


def test_the_index_matches_the_rows_fts5_matches_and_ranks_one_word_alike(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(path)
    answers = answered_by_index(store, monkeypatch)
    for terms in QUERIES:
        for limit in (1000, 25):  # every match; the index's winners before the limit
            got, want = bm25(store, terms, limit), fts5(store, terms, limit)
            assert ids(got) == ids(want), terms  # the same rows match, ranked alike
            assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)
    assert answers and all(answers)
    assert {i for i, _ in bm25(store, ("cafe",))} == {f"m{i:05d}" for i in range(0, 600, 50)}
    # The filters apply to the index's winners; when they hide too many, FTS5 answers.
    rare = MemoryFilter(project="rare")
    for terms in QUERIES:
        assert bm25(store, terms, 10, rare) == fts5(store, terms, 10, rare), terms
    assert answers[-1] is True  # café: 3 rare rows among its 12 winners, no fallback


def test_every_write_from_any_handle_reaches_the_index(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = SQLiteStore(path), SQLiteStore(path)
    answers = answered_by_index(reader, monkeypatch)
    assert bm25(reader, ("zeppelin",)) == []
    writer.insert([memory(9001, "a zeppelin over the river"),
                   memory(9002, "zeppelin zeppelin tea")], None)  # fmt: skip
    assert [i for i, _ in bm25(reader, ("zeppelin",))] == ["m09002", "m09001"]
    writer.replace(memory(9002, "now a hot air balloon"), None)
    assert [i for i, _ in bm25(reader, ("zeppelin",))] == ["m09001"]
    assert [i for i, _ in bm25(reader, ("balloon",))] == ["m09002"]
    writer.forget(["m09001"], hard=False, at=NOW)  # soft: in the index, hidden by the filter
    assert bm25(reader, ("zeppelin",)) == []
    assert [
        i for i, _ in bm25(reader, ("zeppelin",), filters=MemoryFilter(include_forgotten=True))
    ] == ["m09001"]
    writer.forget(["m09002"], hard=True, at=NOW)
    assert bm25(reader, ("balloon",)) == []
    assert answers and all(answers)
    # The writer's syncs pruned the log behind it.
    db = sqlite3.connect(path)
    covered = json.loads((Path(f"{path}.words") / "covered.json").read_text())
    # (All but the entry at the mark, kept so the index can tell the store is the same.)
    assert db.execute("SELECT count(*) FROM word_changes WHERE seq < ?",
                      (covered["seq"],)).fetchone()[0] == 0  # fmt: skip
    assert db.execute("SELECT stamp FROM word_changes WHERE seq = ?",
                      (covered["seq"],)).fetchone()[0] == covered["stamp"]  # fmt: skip


def test_a_search_replays_a_write_that_did_not_sync(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that died after its transaction (its sync never ran): the log has it, and
    the next search replays it; replaying twice changes nothing."""
    store = SQLiteStore(path)
    before = bm25(store, ("river",))
    monkeypatch.setattr(word_index.WordIndex, "sync", lambda self, db, rows: None)
    store.insert([memory(9100, "a river of zeppelins")], None)
    store.forget(["m00001"], hard=True, at=NOW)
    monkeypatch.undo()
    monkeypatch.setattr(word_index, "WORD_INDEX_MIN_ROWS", 100)
    answers = answered_by_index(store, monkeypatch)
    assert [i for i, _ in bm25(store, ("zeppelins",))] == ["m09100"]
    assert answers == [True]
    after = bm25(store, ("river",))
    assert {i for i, _ in after} == ({i for i, _ in before} | {"m09100"}) - {"m00001"}
    assert {i for i, _ in after} == {i for i, _ in fts5(store, ("river",))}
    # Covered set back to the start: the whole log is replayed again, to the same index.
    folder = Path(f"{path}.words")
    covered = json.loads((folder / "covered.json").read_text())
    fresh = SQLiteStore(path)
    (folder / "covered.json").write_text(json.dumps({**covered, "seq": 0, "stamp": None}))
    assert bm25(fresh, ("river",)) == after


def test_it_stands_aside_when_it_cannot_answer_at_once(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = Path(f"{path}.words")
    store = SQLiteStore(path)
    answers = answered_by_index(store, monkeypatch)
    want = fts5(store, ("kayak",))

    # Far behind: FTS5 answers; the next write brings the index up to date.
    monkeypatch.setattr(word_index, "CATCH_UP_MAX", 3)
    monkeypatch.setattr(word_index.WordIndex, "sync", lambda self, db, rows: None)
    store.insert([memory(9200 + i, f"kayak number {i}") for i in range(5)], None)
    monkeypatch.setattr(word_index.WordIndex, "sync", sync)
    want = fts5(store, ("kayak",))
    assert ids(bm25(store, ("kayak",))) == ids(want) and answers[-1] is False
    store.insert([memory(9300, "no boats here")], None)
    assert ids(bm25(store, ("kayak",))) == ids(want) and answers[-1] is True

    # Missing: FTS5 answers; the next write builds it again.
    shutil.rmtree(folder)
    assert ids(bm25(store, ("kayak",))) == ids(want) and answers[-1] is False
    store.insert([memory(9301, "still no boats")], None)
    assert (folder / "covered.json").exists()
    assert ids(bm25(store, ("kayak",))) == ids(want) and answers[-1] is True

    # Another store's index (a copied folder): never read, rebuilt by the next write.
    other = path.with_name("other.db")
    second = SQLiteStore(other)
    second.insert(corpus(200, seed=3), None)
    second.close()
    shutil.rmtree(folder)
    shutil.copytree(Path(f"{other}.words"), folder)
    assert ids(bm25(store, ("kayak",))) == ids(want) and answers[-1] is False
    store.insert([memory(9302, "boats elsewhere")], None)
    assert ids(bm25(store, ("kayak",))) == ids(want) and answers[-1] is True


def test_a_tenant_reads_only_its_own_rows(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    alice = SQLiteStore(path, Tenancy(tenant="alice"))
    bob = SQLiteStore(path, Tenancy(tenant="bob", shared=("team",)))
    alice.insert(corpus(300, seed=1), None)
    bob.insert([memory(i, f"kayak trip {i}") for i in range(150)], None)
    bob.insert([memory(500, "team kayak rules", namespace="team")], None)
    assert Path(f"{path}.words", "covered.json").exists()
    alice_ids = {i for i, _ in bm25(alice, ("kayak",))}
    bob_ids = [i for i, _ in bm25(bob, ("kayak",))]
    assert alice_ids == {i for i, _ in fts5(alice, ("kayak",))} and alice_ids
    assert len(bob_ids) == 151 and "m00500" in bob_ids
    assert {i for i, _ in bm25(bob, ("kayak",), 1000)} == {i for i, _ in fts5(bob, ("kayak",))}
    assert bm25(alice, ("rules",)) == []


def test_a_small_store_keeps_no_index_and_no_log(tmp_path: Path) -> None:
    path = tmp_path / "small.db"
    store = SQLiteStore(path)
    store.insert(corpus(50), None)
    store.replace(memory(3, "changed"), None)
    assert not Path(f"{path}.words").exists()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM word_changes").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM meta WHERE key = 'word_log'").fetchone()[0] == 0


def test_a_handle_told_to_search_exactly_reads_no_index(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(path)
    answers = answered_by_index(store, monkeypatch)
    indexed = bm25(store, ("river", "tea"), 30)
    store.search_exactly()
    assert bm25(store, ("river", "tea"), 30) == indexed
    assert answers == [True]


def test_unreadable_index_files_fall_back_to_fts5(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Segment files broken under the index (a disk error, a hand in the folder): the
    search still answers, from FTS5, and says so in the log."""
    store = SQLiteStore(path)
    want = fts5(store, ("kayak",))
    assert ids(bm25(store, ("kayak",))) == ids(want)
    store.close()
    folder = Path(f"{path}.words")
    for segment in folder.glob("*.idx"):
        # A new file in its place: truncating the mapped one in place would crash this
        # process (SIGBUS) where the first handle's threads still read it.
        broken = segment.with_suffix(".broken")
        broken.write_bytes(b"not an index")
        os.replace(broken, segment)
    fresh = SQLiteStore(path)
    assert ids(bm25(fresh, ("kayak",))) == ids(want)
    assert "FTS5 answers" in caplog.text


def _write_in_a_process(path: str, start: int, count: int, threshold: int) -> None:
    """A writer process: batches of 10 memories, each write brought into the word index."""
    word_index.WORD_INDEX_MIN_ROWS = threshold
    store = SQLiteStore(path)
    for first in range(start, start + count, 10):
        store.insert([memory(i, f"zeppelin log {i} river") for i in range(first, first + 10)],
                     None)  # fmt: skip
    store.close()


def test_writers_in_other_processes_and_one_killed_lose_nothing(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes write at once while this one searches; a third is killed mid-write.
    Every committed row reaches the index: its answers are FTS5's, row for row."""
    import multiprocessing
    import os
    import signal
    import time

    spawn = multiprocessing.get_context("spawn")
    writers = [spawn.Process(target=_write_in_a_process, args=(str(path), start, 200, 100))
               for start in (10_000, 20_000)]  # fmt: skip
    victim = spawn.Process(target=_write_in_a_process, args=(str(path), 30_000, 5_000, 100))
    for process in (*writers, victim):
        process.start()
    store = SQLiteStore(path)
    deadline = time.monotonic() + 60
    while any(p.is_alive() for p in writers) and time.monotonic() < deadline:
        bm25(store, ("zeppelin",), 25)  # searches meanwhile: catch-ups, or FTS5 while busy
    db = sqlite3.connect(path)
    while time.monotonic() < deadline and db.execute(
        "SELECT count(*) FROM memories WHERE id >= 'm30000'").fetchone()[0] < 50:  # fmt: skip
        time.sleep(0.05)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    for process in (*writers, victim):
        process.join(30)
    assert all(p.exitcode == 0 for p in writers)
    store.insert([memory(99_999, "after the crash")], None)  # a write replays the log
    answers = answered_by_index(store, monkeypatch)
    stored = db.execute("SELECT count(*) FROM memories WHERE content LIKE 'zeppelin log%'")
    assert stored.fetchone()[0] >= 450
    for terms in (("zeppelin",), ("river",), ("log",)):
        got, want = bm25(store, terms, 5000), fts5(store, terms, 5000)
        assert ids(got) == ids(want), terms
    assert answers == [True, True, True]
