"""The thread pools a search spreads its work over, and when it does."""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from pathlib import Path

import pytest

from recalld import threads


@pytest.mark.parametrize(("load", "cores", "busy"), [
    (0.0, 2, False), (0.9, 2, False), (1.0, 2, True), (3.5, 2, True), (3.9, 8, False),
    (4.0, 8, True),
])  # fmt: skip
def test_the_machine_is_busy_from_a_load_of_half_its_cores(
    monkeypatch: pytest.MonkeyPatch, load: float, cores: int, busy: bool
) -> None:
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(threads, "own_load", lambda: 0.0)
    assert threads.machine_busy() is busy
    monkeypatch.setattr(threads, "own_load", lambda: 0.6)  # this process's own part
    assert threads.machine_busy() is (load - 0.6 >= cores / 2)


def test_own_load_is_this_process_cpu_over_the_last_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = {"wall": 1000.0, "cpu": 50.0}
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(threads.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(threads, "_own_samples", deque())
    assert threads.own_load() == 0.0  # nothing to compare with yet
    clock["wall"], clock["cpu"] = 1010.0, 65.0  # 1.5 cores for 10 s
    assert threads.own_load() == pytest.approx(1.5)
    clock["wall"], clock["cpu"] = 1080.0, 65.0  # then idle: the busy start leaves the window
    assert threads.own_load() == pytest.approx(0.0)
    assert len(threads._own_samples) <= 2


def test_without_a_load_average_the_machine_counts_as_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> tuple[float, float, float]:
        raise OSError("no load average here")

    monkeypatch.setattr(threads.os, "getloadavg", missing)
    assert threads.machine_busy() is False


def test_a_pool_runs_work_again_in_a_forked_child() -> None:
    pool = threads.LazyPool(1, "recalld-test-fork")
    assert pool.submit(lambda: 1).result(timeout=10) == 1  # the parent's thread is started
    child = os.fork()
    if child == 0:  # the parent's worker thread does not exist here
        try:
            ok = pool.submit(lambda: 2).result(timeout=10) == 2
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 30
    while (found := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if found[0] == 0:  # stuck: never leave it behind
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail("the forked child's pool never ran the work")
    assert os.waitstatus_to_exitcode(found[1]) == 0


def test_a_search_counts_itself_in_flight(tmp_path: Path) -> None:
    """While a search runs, the process knows it is in flight (so that its reads spread over
    the cores only when it has them alone), and knows when a second one is; after, none is."""
    import recalld
    from recalld.providers.embedders import FakeEmbedder, Vectors

    seen: list[tuple[int, bool]] = []

    class Watching(FakeEmbedder):
        def embed_query(self, text: str) -> Vectors:
            if text == "harbour crane":  # the search's own query (not the calibration's)
                seen.append((threads._in_flight, threads.alone()))
            return super().embed_query(text)

    with recalld.open(tmp_path / "m.db", embedder=Watching()) as engine:
        engine.add("a memory about the harbour crane")
        engine.search("harbour crane")
        with threads.searching():  # another search of this process in flight
            engine.search("harbour crane")
    assert seen == [(1, True), (2, False)]
    assert threads._in_flight == 0 and threads.alone()
