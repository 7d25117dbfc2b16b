"""Two real processes writing to the same store file at once lose nothing."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder

PER_PROCESS = 100
OPEN_UNDER_LOCK_S = 10.0
"""Well under the 30 s an open would wait for the lock."""
WRITER = """
import sys, time
from pathlib import Path
import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder

db, cache, go, name = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
count = int(sys.argv[5])
deadline = time.monotonic() + 60
while not go.exists():  # start together, so the writes really interleave
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.005)
with recalld.open(settings=Settings(db=db, cache_dir=cache), embedder=FakeEmbedder()) as engine:
    for i in range(count):
        result = engine.add(f"{name} memory {i}: writer {name} stored item number {i}")
        assert result.created, result
        if i % 10 == 0:
            engine.search(f"{name} item {i}", limit=3)  # reads interleave with the other writes
print("done", name)
"""


@pytest.mark.integration
def test_two_processes_adding_at_once_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(cache), str(go), name, str(PER_PROCESS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for name in ("left", "right")
    ]
    time.sleep(0.5)  # both are importing; the first open creates the file
    go.touch()
    outputs = [w.communicate(timeout=120) for w in writers]
    for writer, (out, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
        assert out.startswith("done")
    with recalld.open(settings=Settings(db=db, cache_dir=None), embedder=FakeEmbedder()) as engine:
        stored = engine.list(limit=10 * PER_PROCESS)
        contents = {m.content for m in stored}
        for name in ("left", "right"):
            for i in range(PER_PROCESS):
                assert f"{name} memory {i}: writer {name} stored item number {i}" in contents
        assert len(stored) == 2 * PER_PROCESS
        stats = engine.status().store
        assert stats.with_vectors == 2 * PER_PROCESS
        # Every process's vectors are searchable from a fresh reader: each text finds itself
        # with cosine 1 (the fake embedder is deterministic).
        for name, i in (("left", 3), ("right", 57), ("left", 99), ("right", 0)):
            text = f"{name} memory {i}: writer {name} stored item number {i}"
            hits = engine.search(text, mode="vector", limit=5, explain=True).hits
            exact = [h for h in hits if h.memory.content == text]
            assert exact and exact[0].trace is not None
            assert exact[0].trace.channels[0].score > 0.999


def test_opening_a_store_waits_for_no_writer(tmp_path: Path) -> None:
    """A store already up to date opens, searches and lists while another process holds its
    write lock (a long import, a reindex): opening takes the lock only to migrate."""
    settings = Settings(db=str(tmp_path / "s.db"), cache_dir=str(tmp_path / "cache"))
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.add("the ferry leaves from pier three")
    holder = sqlite3.connect(settings.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # what a writer in another process holds
    try:
        started = time.monotonic()
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            assert [h.memory.content for h in engine.search("ferry pier").hits] == [
                "the ferry leaves from pier three"
            ]
        assert time.monotonic() - started < OPEN_UNDER_LOCK_S
    finally:
        holder.rollback()
        holder.close()
