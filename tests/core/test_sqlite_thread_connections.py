"""A SQLite store's per-thread connections end with their threads (a server's thread pool
retires idle threads and starts new ones for every burst of requests), and each reads the
file through a memory map."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from recalld.stores.sqlite.store import SQLiteStore

THREADS = 40


def open_files(path: Path) -> int:
    """How many descriptors of this process name the store's file or its WAL."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(path))
    return count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_a_finished_thread_leaves_no_connection_open(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    try:
        assert store.active_keys() == 0
        counts = [open_files(path)]
        for n in range(THREADS):  # one after another, as a pool's retired threads are
            thread = threading.Thread(target=store.active_keys)
            thread.start()
            thread.join()
            if n in (4, THREADS - 1):
                counts.append(open_files(path))
        # SQLite may keep one closed connection's descriptor for reuse while the file is
        # locked in this process; none more, however many threads came and went
        assert counts[2] == counts[1] <= counts[0] + 1, counts
        seen: list[int] = []
        live = [threading.Thread(target=lambda: seen.append(store.active_keys()))
                for _ in range(4)]  # fmt: skip
        for thread in live:
            thread.start()
        for thread in live:
            thread.join()
        assert seen == [0] * 4 and store.active_keys() == 0  # the store still answers
    finally:
        store.close()
    assert open_files(path) == 0


def test_an_in_memory_store_outlives_the_thread_that_opened_it() -> None:
    held: list[SQLiteStore] = []
    opener = threading.Thread(target=lambda: held.append(SQLiteStore(":memory:")))
    opener.start()
    opener.join()
    (store,) = held
    assert store.active_keys() == 0  # its one connection is the database: still open
    store.close()


def maps_of(path: Path) -> int:
    """How many maps of the store's file itself this process holds (its WAL index, ``-shm``,
    is always mapped: it does not count)."""
    with open("/proc/self/maps") as maps:
        return sum(line.split(maxsplit=5)[5:] == [str(path)] for line in maps.read().splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_every_threads_connection_reads_the_file_through_a_map(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SQLiteStore(path).close()  # the schema written, and moved from the WAL into the file
    assert maps_of(path) == 0
    store = SQLiteStore(path)
    try:
        assert store.active_keys() == 0
        opener = maps_of(path)
        assert opener == 1  # the opening thread's connection
        found: list[tuple[int, int]] = []

        def read() -> None:
            found.append((store.active_keys(), maps_of(path)))

        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
        assert found == [(0, opener + 1)]  # the thread's own connection maps it too
    finally:
        store.close()
    assert maps_of(path) == 0  # the maps were the store's connections', closed with them
