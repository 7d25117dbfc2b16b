"""``recalld serve --workers 2``: two processes on one SQLite store, on loopback. A write
answered by one worker is read, searched, superseded and forgotten on the other at once;
the inspector, ``/v1`` and ``/mcp/`` answer on both; keys hold on both; the shell's
discovery file is written once and removed with the last worker; a bad count is refused.

Which worker answered is the ``X-Recalld-Worker`` header (its pid). Each request goes on a
new connection, and the kernel spreads new connections over the workers, so a request
that must reach the other worker is sent again (a read only, never a write) until it does,
at most :data:`TRIES` times."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import free_port, wait_until_serving
from tests.conftest import subprocess_env

import recalld
from recalld.interfaces.workers import BALANCED, WORKER_HEADER
from recalld.keys import create_key, revoke_key

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not BALANCED, reason="connections reach every worker where balanced"),
]

TRIES = 60
"""Fresh connections tried to reach a given worker (each lands on one of two at random:
missing one 60 times in a row happens once in 10^18)."""
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "probe", "version": "0"}}}  # fmt: skip
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
STARTING_S = 8.0
"""Time for the parent to open the store and fork the workers, and for them to start."""
PROMPT_STOP_S = 10.0
"""A stop well under the store's 30 s lock wait (and the parent's 30 s before a kill)."""


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    runtime: Path
    headers: dict[str, str]

    def send(self, method: str, path: str, **options: Any) -> httpx.Response:
        """One request on a connection of its own (any worker may take it)."""
        headers = {**self.headers, **options.pop("headers", {})}
        with httpx.Client(base_url=self.url, timeout=60, headers=headers) as http:
            return http.request(method, path, **options)

    def on_other(self, than: str, method: str, path: str, **options: Any) -> httpx.Response:
        """A read answered by a worker other than the one whose pid is ``than``."""
        for _ in range(TRIES):
            answer = self.send(method, path, **options)
            if answer.headers[WORKER_HEADER] != than:
                return answer
        raise AssertionError(f"no other worker than {than} answered {TRIES} requests")

    def workers(self) -> set[str]:
        """The pids of the workers, seen in answers (both, within TRIES requests)."""
        seen: set[str] = set()
        for _ in range(TRIES):
            seen.add(self.send("GET", "/healthz").headers[WORKER_HEADER])
            if len(seen) == 2:
                break
        return seen


def launch(
    env: dict[str, str], command: list[str], runtime: Path
) -> tuple[subprocess.Popen[str], int]:
    """``recalld serve --workers 2`` on a free port, started (not yet serving)."""
    runtime.mkdir(mode=0o700, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        [*command, "serve", "--port", str(port), "--workers", "2"],
        env={**env, "XDG_RUNTIME_DIR": str(runtime)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def start(env: dict[str, str], command: list[str], tmp_path: Path) -> Served:
    runtime = tmp_path / "runtime"
    process, port = launch(env, command, runtime)
    wait_until_serving(process, port, 120)
    return Served(process, f"http://127.0.0.1:{port}", runtime, {})


def stop(served: Served, how: int = signal.SIGTERM) -> str:
    served.process.send_signal(how)
    _, err = served.process.communicate(timeout=60)
    return err


@pytest.fixture
def env(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, str]:
    """A new store, served with the packaged model."""
    return {**cli_env, "RECALLD_DB": str(tmp_path / "served.db"), "RECALLD_EMBEDDER": "local"}


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, recalld_command: list[str]
) -> Iterator[Served]:
    """One server for the tests that only read what they wrote (a model load saved)."""
    folder = tmp_path_factory.mktemp("served")
    env = {**subprocess_env(folder), "RECALLD_DB": str(folder / "served.db"),
           "RECALLD_EMBEDDER": "local"}  # fmt: skip
    server = start(env, recalld_command, folder)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            stop(server)


def hits(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [hit["memory"]["id"] for hit in answer.json()["hits"]]


def test_what_one_worker_writes_the_other_reads_searches_and_changes_at_once(
    served: Served,
) -> None:
    assert len(served.workers()) == 2
    written = []
    for n, content in enumerate([
        "The harbour crane number four was repainted signal blue in March.",
        "Our ferry to the island leaves from pier three at 7:15 on weekdays.",
        "The sourdough starter lives in the second fridge, fed every twelve hours.",
    ]):  # fmt: skip
        added = served.send("POST", "/v1/memories", json={"content": content})
        assert added.status_code in (200, 201), added.text
        writer, memory_id = added.headers[WORKER_HEADER], added.json()["id"]
        got = served.on_other(writer, "GET", f"/v1/memories/{memory_id}")
        assert got.status_code == 200 and got.json()["content"] == content
        found = served.on_other(writer, "POST", "/v1/search", json={"query": content, "limit": 3})
        assert hits(found)[0] == memory_id, n
        written.append((writer, memory_id))

    # Superseded on one worker: the other shows the replacement, never the old one above it.
    red = "The harbour crane number four is painted red now."
    newer = served.send("POST", "/v1/memories", json={"content": red})
    old_id, new_id = written[0][1], newer.json()["id"]
    marked = served.send("POST", f"/v1/memories/{old_id}/supersede", json={"by": new_id})
    assert marked.status_code == 200, marked.text
    writer = marked.headers[WORKER_HEADER]
    got = served.on_other(writer, "GET", f"/v1/memories/{old_id}")
    assert got.json()["superseded_by"] == new_id
    ranked = hits(served.on_other(writer, "POST", "/v1/search",
                                  json={"query": "what colour is crane number four?"}))  # fmt: skip
    assert new_id in ranked
    assert old_id not in ranked or ranked.index(new_id) < ranked.index(old_id)

    # Forgotten on one worker: the other's search no longer finds it, nor its read.
    forgotten_id = written[1][1]
    gone = served.send("DELETE", f"/v1/memories/{forgotten_id}")
    assert gone.status_code == 200, gone.text
    writer = gone.headers[WORKER_HEADER]
    found = served.on_other(writer, "POST", "/v1/search",
                            json={"query": "ferry to the island from pier three"})  # fmt: skip
    assert forgotten_id not in hits(found)


def test_writes_at_once_on_both_workers_are_all_kept(served: Served) -> None:
    """Eight clients adding at once, over both workers: every add answered 201 (writers
    queue on the store's lock), and each memory readable from either worker."""

    def add(n: int) -> tuple[str, str]:
        note = f"Parallel note {n}: locker {n} holds kit {n}."
        answer = served.send("POST", "/v1/memories", json={"content": note})
        assert answer.status_code == 201, answer.text
        return answer.headers[WORKER_HEADER], answer.json()["id"]

    with ThreadPoolExecutor(8) as pool:
        added = list(pool.map(add, range(24)))
    assert len({worker for worker, _ in added}) == 2
    for writer, memory_id in added[:4]:
        assert served.on_other(writer, "GET", f"/v1/memories/{memory_id}").status_code == 200


def test_the_inspector_the_api_and_the_mcp_tools_answer_on_every_worker(served: Served) -> None:
    seen: dict[str, set[str]] = {}
    for _ in range(TRIES):
        page = served.send("GET", "/")
        api = served.send("GET", "/v1/status")
        tools = served.send("POST", "/mcp/", json=INITIALIZE, headers=MCP_ACCEPT)
        for name, answer in (("inspector", page), ("api", api), ("mcp", tools)):
            assert answer.status_code == 200, (name, answer.text)
            seen.setdefault(name, set()).add(answer.headers[WORKER_HEADER])
        assert "<html" in page.text.lower() and api.json()["store"]["path"]
        assert "serverInfo" in tools.text
        if all(len(pids) == 2 for pids in seen.values()):
            break
    assert {name: len(pids) for name, pids in seen.items()} == {
        "inspector": 2, "api": 2, "mcp": 2}  # fmt: skip


def test_keys_hold_on_every_worker_and_a_revoke_reaches_all_at_once(
    env: dict[str, str], recalld_command: list[str], tmp_path: Path
) -> None:
    settings = recalld.Settings(db=Path(env["RECALLD_DB"]), cache_dir=None, embedder="local")
    with recalld.open(settings=settings) as engine:
        key = create_key(engine.store, "alice")[1]
    served = start(env, recalld_command, tmp_path)
    try:
        served.headers = {"Authorization": f"Bearer {key}"}
        pids = served.workers()
        assert len(pids) == 2  # the key answers on both
        refused = served.send("GET", "/v1/status", headers={"Authorization": "Bearer rk_0_no"})
        assert refused.status_code == 401
        with recalld.open(settings=settings) as engine:
            revoke_key(engine.store, key)
        answered = {}
        for _ in range(TRIES):
            answer = served.send("GET", "/v1/status")
            answered[answer.headers[WORKER_HEADER]] = answer.status_code
            if len(answered) == 2:
                break
        assert answered == dict.fromkeys(pids, 401)
    finally:
        stop(served)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_ends_every_worker_and_removes_the_one_discovery_file(
    env: dict[str, str], recalld_command: list[str], tmp_path: Path, how: int
) -> None:
    served = start(env, recalld_command, tmp_path)
    pids = {int(pid) for pid in served.workers()}
    assert len(pids) == 2 and served.process.pid not in pids
    (record,) = (served.runtime / "recalld").iterdir()  # one file, the parent's
    assert json.loads(record.read_text())["pid"] == served.process.pid
    err = stop(served, how)
    assert served.process.returncode == 0, err
    assert "Traceback" not in err, err
    assert list((served.runtime / "recalld").iterdir()) == []
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_that_dies_stops_the_whole_server(
    env: dict[str, str], recalld_command: list[str], tmp_path: Path
) -> None:
    """No half a server: the other worker stops too, the exit code says it failed, and the
    discovery file goes."""
    served = start(env, recalld_command, tmp_path)
    pids = {int(pid) for pid in served.workers()}
    os.kill(min(pids), signal.SIGKILL)
    _, err = served.process.communicate(timeout=60)
    assert served.process.returncode == 1, err
    assert "exited (code -9): stopping the server" in err
    assert list((served.runtime / "recalld").iterdir()) == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("count", ["0", "-1"])
def test_a_worker_count_below_one_is_refused(
    env: dict[str, str], recalld_command: list[str], count: str
) -> None:
    done = subprocess.run([*recalld_command, "serve", "--workers", count, "--port", "0"],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "--workers" in done.stderr and ">=1" in done.stderr, done.stderr
    assert not Path(env["RECALLD_DB"]).exists()  # nothing was opened or made


def test_a_server_starts_and_stops_at_once_while_another_process_writes(
    env: dict[str, str], recalld_command: list[str], tmp_path: Path
) -> None:
    """Another process holding the store's write lock (a long import) holds up neither the
    server's start nor its stop: opening a store that needs no migration takes no lock,
    and a worker stopped before it serves ends there and then (even inside a C call, a
    model load or a lock wait, where no Python handler runs)."""
    made = subprocess.run([*recalld_command, "add", "a memory before the server"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert made.returncode == 0, made.stderr
    holder = sqlite3.connect(env["RECALLD_DB"], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # readers go on (WAL); a writer waits
    try:
        process, _ = launch(env, recalld_command, tmp_path / "runtime")
        time.sleep(STARTING_S)
        assert process.poll() is None, process.communicate()[1]
        process.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        _, err = process.communicate(timeout=60)
        assert time.monotonic() - asked < PROMPT_STOP_S
        assert "before serving" not in err, err  # the stop asked for, not a worker's failure
    finally:
        holder.rollback()
        holder.close()
