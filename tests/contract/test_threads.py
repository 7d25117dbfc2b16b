"""One store handle shared by many threads (as a server uses it): nothing lost, no error."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from .conftest import Opener

WRITERS, READERS, PER_WRITER = 3, 3, 40


def test_concurrent_readers_and_writers_on_one_handle(open_as: Opener, tmp_path: Path) -> None:
    engine = open_as("alice", cache_dir=tmp_path / "cache")  # the cache on, as a server has it
    engine.add("seed memory so that the first searches have something to read")
    errors: list[BaseException] = []
    writers_done = threading.Event()
    reads = [0] * READERS

    def write(n: int) -> None:
        try:
            for i in range(PER_WRITER):
                assert engine.add(f"writer {n} stored item {i} about kayaks", session_id=f"w{n}")
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    def read(n: int) -> None:
        deadline = time.monotonic() + 60
        try:
            while not writers_done.is_set() and time.monotonic() < deadline:
                engine.search("kayak item", limit=5, mode="hybrid")
                engine.list(limit=10)
                engine.status()
                reads[n] += 1
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    readers = [threading.Thread(target=read, args=(n,)) for n in range(READERS)]
    for thread in [*writers, *readers]:
        thread.start()
    for thread in writers:
        thread.join(timeout=120)
    writers_done.set()
    for thread in readers:
        thread.join(timeout=120)
    assert errors == []
    assert all(count > 0 for count in reads)
    assert engine.status().store.memories == 1 + WRITERS * PER_WRITER
    for n in range(WRITERS):
        session = engine.list(session_id=f"w{n}", limit=1000, newest_first=False)
        # Each session's turns got distinct places 0..n-1 although writers interleaved.
        assert sorted(m.position for m in session) == list(range(PER_WRITER))
