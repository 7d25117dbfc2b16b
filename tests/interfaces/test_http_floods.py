"""``recalld serve`` under a flood of idle and half-sent connections, on loopback.

The server is started with the common default of 1,024 descriptors (soft and hard, so it
cannot raise them): 2,000 connections that never finish their request must neither kill it
nor keep ``/healthz`` from answering within a second, and each is closed after the header
time allowed.
"""

from __future__ import annotations

import resource
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_helpers import free_port, wait_until_serving

from recalld.bench.floods import closed_by_server, healthz, open_connections

pytestmark = pytest.mark.integration

FLOOD = 2000
DESCRIPTORS = 1024
"""The server's descriptor limit in this test: the usual default, fixed (hard = soft)."""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


@pytest.fixture
def flood_room() -> Iterator[None]:
    """Descriptors enough in the test process itself for the flood."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 200:
        pytest.skip(f"the test needs {FLOOD + 200} descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 200), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_idle_and_half_sent_connections_neither_kill_the_server_nor_block_it(
    flood_room: None, cli_env: dict[str, str], recalld_command: list[str], tmp_path: Path
) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**cli_env, "RECALLD_EMBEDDER": "fake", "RECALLD_DB": str(tmp_path / "flood.db"),
           "XDG_RUNTIME_DIR": str(runtime)}  # fmt: skip
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen([*recalld_command, "serve", "--port", str(port)], env=env,
                               stdout=log, stderr=subprocess.STDOUT,
                               preexec_fn=_limited)  # fmt: skip
    held: list[socket.socket] = []
    try:
        wait_until_serving(process, port)
        held = open_connections(port, FLOOD)
        started = time.monotonic()
        answer = healthz(port)
        took = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 200") and took < 1.0, (answer[:40], took)
        assert process.poll() is None, (tmp_path / "serve.log").read_text()
        # A connection that does not finish its request head in time is closed.
        time.sleep(6.5)
        open_ = [c for c in held[-50:] if not closed_by_server(c)]
        assert not open_, f"{len(open_)} of the last 50 idle connections still open"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        for connection in held:
            connection.close()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()
    said = (tmp_path / "serve.log").read_text()
    assert process.returncode == 0 and "Traceback" not in said, said[-2000:]
    assert list((runtime / "recalld").iterdir()) == [], "the discovery file was left behind"
