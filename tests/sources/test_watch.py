from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sources_helpers import write

import recalld
from recalld.sources.indexer import IndexReport


def _until(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def _start(engine: recalld.MemoryEngine, path: Path, reports: list[IndexReport],
           stop: threading.Event, **timing: float) -> threading.Thread:  # fmt: skip
    thread = threading.Thread(
        target=engine.watch, args=([path],),
        kwargs={"on_report": reports.append, "stop": stop, "max_seconds": 30.0, **timing},
    )  # fmt: skip
    thread.start()
    return thread


def test_watch_follows_edits_and_deletes(eng: recalld.MemoryEngine, workspace: Path) -> None:
    reports: list[IndexReport] = []
    stop = threading.Event()
    thread = _start(eng, workspace, reports, stop, interval=0.05, debounce=0.1)
    try:
        _until(lambda: len(reports) == 1)
        assert len(reports[0].indexed) == 6
        added = write(workspace / "memory" / "2026-04-01.md", "# April\n\nBought a kayak.\n")
        _until(lambda: len(reports) == 2)
        assert reports[1].indexed == (str(added),)
        added.unlink()
        _until(lambda: len(reports) == 3)
        assert reports[2].removed == (str(added),)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert not any("kayak" in m.content for m in eng.list(types=["chunk"], limit=100))


def test_watch_debounces_a_burst_into_one_run(eng: recalld.MemoryEngine, workspace: Path) -> None:
    reports: list[IndexReport] = []
    stop = threading.Event()
    thread = _start(eng, workspace, reports, stop, interval=0.05, debounce=1.0)
    try:
        _until(lambda: len(reports) == 1)
        for i in range(3):
            write(workspace / "memory" / f"burst-{i}.md", f"Burst note {i}.\n")
            time.sleep(0.1)
        _until(lambda: len(reports) == 2)
        time.sleep(0.3)
        assert len(reports) == 2
        assert sorted(Path(p).name for p in reports[1].indexed) == [
            "burst-0.md", "burst-1.md", "burst-2.md"]  # fmt: skip
    finally:
        stop.set()
        thread.join(10)


def test_watch_stops_after_max_seconds(eng: recalld.MemoryEngine, workspace: Path) -> None:
    started = time.monotonic()
    runs = eng.watch([workspace], interval=0.05, max_seconds=0.5)
    assert runs == 1 and 0.4 < time.monotonic() - started < 10


def test_watch_waits_for_an_empty_workspace_to_fill(
    eng: recalld.MemoryEngine, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    reports: list[IndexReport] = []
    stop = threading.Event()
    thread = _start(eng, empty, reports, stop, interval=0.05, debounce=0.05)
    try:
        _until(lambda: len(reports) == 1)
        assert reports[0].empty
        write(empty / "MEMORY.md", "I like hiking.\n")
        _until(lambda: len(reports) == 2)
        assert reports[1].total_chunks == 1
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.integration
def test_ctrl_c_stops_the_watch_command_cleanly(
    tmp_path: Path, workspace: Path, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, "RECALLD_EMBEDDER": "fake"}
    main = "from recalld.interfaces.cli import main; main()"
    command = [sys.executable, "-c", main, "--db", str(tmp_path / "w.db"), "watch",
               str(workspace), "--interval", "0.1"]  # fmt: skip
    # A run started in the background inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the child the default disposition, as a terminal would.
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.startswith("indexed 6 file(s)"), first
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert child.returncode == 0, err
    assert "stopped watching" in err and "Traceback" not in err
