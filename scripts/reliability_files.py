"""The reliability run on the store's own files (SQLite: PostgreSQL keeps its files itself):
a store restored from a backup beside the word and ANN indexes that followed it further, the
modes of everything a store, its indexes and its cache create under umask 022, and a store
written by a newer recalld (a schema step this code does not know)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

from reliability_common import Run, cli_env, engine, memories, recalld_command

from recalld.errors import RecalldError, StoreError
from recalld.records import NewMemory
from recalld.stores.base import CandidateRequest, NearestAsk, WordsAsk
from recalld.stores.sqlite import word_index
from recalld.stores.sqlite.migrations import SCHEMA_VERSION

SMALL_INDEX_ROWS = 300
"""The word index's size threshold in this process: the index is the same at any size, and
a store of 50,000 memories per trial would make the run minutes longer."""


def file_checks(run: Run, trials: int) -> None:
    """Restore-then-write, file modes, schema from the future (each on SQLite)."""
    if "sqlite" not in run.backends:
        return
    restore_then_write(run, trials)
    file_modes(run)
    schema_from_the_future(run)


@contextlib.contextmanager
def _small_word_index() -> Iterator[None]:
    before = word_index.WORD_INDEX_MIN_ROWS
    word_index.WORD_INDEX_MIN_ROWS = SMALL_INDEX_ROWS
    try:
        yield
    finally:
        word_index.WORD_INDEX_MIN_ROWS = before


# -- restore then write --------------------------------------------------------------------


def restore_then_write(run: Run, trials: int) -> None:
    """Build the word and ANN indexes, back the store up, add 1-40 memories (the indexes
    follow), restore the backup (the indexes kept), add a memory: the word channel and the
    vector channel find it, and the word channel none of the undone ones."""
    words = run.check("restore-then-write: the word channel finds the new memory", "sqlite")
    vectors = run.check("restore-then-write: the vector channel finds the new memory", "sqlite")
    if not word_index.words_available():
        words.attempt(False, "tantivy is not installed: the word index cannot be tried")
    rng = random.Random(run.seed)
    with _small_word_index():
        for trial in range(trials):
            lost = rng.randint(1, 40)
            found_by_words, found_by_vector = _restore_trial(run, trial, lost)
            words.attempt(*found_by_words)
            vectors.attempt(*found_by_vector)
    for check in (words, vectors):
        check.observe(float(trials), f"{trials} restores, 1-40 memories undone each")


def _restore_trial(run: Run, trial: int, lost: int) -> tuple[tuple[bool, str], ...]:
    db = Path(run.location("sqlite", "restore"))
    ann = Path(f"{db}.ann")
    with engine(str(db)) as first:
        _with_ann(first.store, ann)
        first.add_many(memories("seed", SMALL_INDEX_ROWS + 100))
        first.search("harbour crane")  # the ANN index is built and saved
    backup = db.with_name(db.name + ".backup")
    with contextlib.closing(sqlite3.connect(db)) as live, \
            contextlib.closing(sqlite3.connect(backup)) as copy:  # fmt: skip
        live.backup(copy)
    with engine(str(db)) as second:
        _with_ann(second.store, ann)
        second.add_many([NewMemory(f"undone zeppelin {trial} {i}") for i in range(lost)])
        second.search("harbour crane")  # the ANN index saved again when enough changed
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, db)
    word = f"quokka{trial}x"
    with engine(str(db)) as restored:
        made = restored.add(f"a {word} on the ferry").id
    with engine(str(db)) as reader:  # a new process's view: the saved indexes
        _with_ann(reader.store, ann)
        found = reader.store.candidates(CandidateRequest(asks={"bm25": WordsAsk(10, (word,))}))
        undone = reader.store.candidates(
            CandidateRequest(asks={"bm25": WordsAsk(10, ("zeppelin",))})
        )
        query = reader.store.vectors_for([made])[made]
        near = reader.store.candidates(CandidateRequest(asks={"semantic": NearestAsk(5, query)}))
    got = [c.memory_id for c in found.get("bm25", [])]
    ghosts = [c.memory_id for c in undone.get("bm25", [])]
    nearest = [c.memory_id for c in near.get("semantic", [])]
    return ((got == [made] and not ghosts, f"trial {trial}: found {got}, undone rows {ghosts}"),
            (made in nearest, f"trial {trial}: {made} not among its vector's nearest"))  # fmt: skip


# -- file modes ----------------------------------------------------------------------------


def file_modes(run: Run) -> None:
    """Under umask 022: a store, its word and ANN indexes, its embedding cache and an indexed
    workspace through the library, and a store made by ``recalld add``: every file and
    folder created is its owner's alone."""
    check = run.check("file modes: nothing recalld creates is readable by others", "sqlite")
    top = run.folder / "modes"
    workspace = run.folder / "modes-workspace"
    workspace.mkdir()
    (workspace / "MEMORY.md").write_text("# Notes\n\nThe kayak club meets on Tuesdays.\n")
    previous = os.umask(0o022)
    try:
        with _small_word_index(), engine(str(top / "lib" / "data" / "memory.db"),
                                         cache_dir=top / "lib" / "cache") as made:  # fmt: skip
            _with_ann(made.store, top / "lib" / "data" / "memory.db.ann")
            made.add_many(memories("modes", SMALL_INDEX_ROWS + 100))
            made.index([workspace])
            made.search("kayak club")
            paths = _paths(top)  # while open: its -wal and -shm exist
        env = {**cli_env(run, RECALLD_DB=str(top / "cli" / "data" / "memory.db")),
               "RECALLD_CACHE_DIR": str(top / "cli" / "cache")}  # fmt: skip
        done = subprocess.run([*recalld_command(), "add", "a memory from the shell"], env=env,
                              capture_output=True, text=True, timeout=120, umask=0o022)  # fmt: skip
        check.attempt(done.returncode == 0, f"recalld add failed: {done.stderr[-200:]}")
        paths += [p for p in _paths(top) if p not in paths]
    finally:
        os.umask(previous)
    for path, mode in paths:
        check.attempt(not mode & 0o077, f"{path.relative_to(top)} {stat.filemode(mode)}")
    names = {p.name for p, _ in paths}
    covered = [n for n in ("memory.db-wal", "memory.db.words", "memory.db.ann",
                           "embeddings.sqlite", "covered.json") if n in names]  # fmt: skip
    check.observe(float(len(paths)), f"{len(paths)} files and folders ({', '.join(covered)})")


def _with_ann(store: object, folder: Path) -> None:
    """Give the store an ANN index from 100 vectors (when usearch is installed)."""
    from recalld.stores.sqlite.vector_index import ann_available
    from recalld.stores.sqlite.vectors import VectorMirror

    if ann_available():
        store.vector_reads.mirror = VectorMirror(folder, ann_min_rows=100, subset_exact_rows=10,  # type: ignore[attr-defined]
                                      build_threads=1)  # fmt: skip


def _paths(top: Path) -> list[tuple[Path, int]]:
    return [(p, p.lstat().st_mode) for p in [top, *sorted(top.rglob("*"))]
            if not p.is_symlink()]  # fmt: skip


# -- schema from the future ----------------------------------------------------------------


def schema_from_the_future(run: Run) -> None:
    """A store that records a later schema step: read (search, list) but every write refused
    with a message naming both versions, through the library and the CLI; the file as it
    was."""
    check = run.check("schema from the future: read, writes refused, file unchanged", "sqlite")
    db = run.location("sqlite", "future")
    with engine(db) as made:
        made.add_many(memories("future", 20))
    future = SCHEMA_VERSION + 1
    with contextlib.closing(sqlite3.connect(db)) as newer, newer:
        newer.execute("INSERT INTO migrations VALUES (?, 'm_later_step', 0)", (future,))
    before = hashlib.sha256(Path(db).read_bytes()).hexdigest()
    wanted = f"schema version {future}"
    with engine(db) as opened:
        check.attempt(bool(opened.search("kayak").hits), "a search found nothing")
        check.attempt(len(opened.list(limit=50)) == 20, "list did not show the 20 memories")
        for label, write in (("add", lambda: opened.add("a new memory")),
                             ("forget", lambda: opened.forget(["future-1"]))):  # fmt: skip
            try:
                write()
                check.attempt(False, f"{label} was written")
            except StoreError as exc:
                check.attempt(wanted in str(exc), f"{label} refused unclearly: {exc}")
            except RecalldError as exc:
                check.attempt(False, f"{label}: {exc!r}")
    done = subprocess.run([*recalld_command(), "add", "from the shell"], capture_output=True,
                          text=True, timeout=120, env=cli_env(run, RECALLD_DB=db))  # fmt: skip
    check.attempt(done.returncode == 4 and wanted in done.stderr,
                  f"recalld add: exit {done.returncode}, {done.stderr[-200:]}")  # fmt: skip
    after = hashlib.sha256(Path(db).read_bytes()).hexdigest()
    check.attempt(after == before, "the store file changed")
    check.observe(1.0, f"schema {future} against {SCHEMA_VERSION}: 2 reads, 3 writes refused")
