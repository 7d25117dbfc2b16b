"""Run ``recalld serve`` (or any server) on a loopback port from a test."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from recalld.bench.load import answers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def wait_until_serving(process: subprocess.Popen[Any], port: int, seconds: float = 60.0) -> None:
    """Return once the server on 127.0.0.1:``port`` answers ``/healthz``; fail the test if
    its process exits first or it takes longer than ``seconds``."""
    assert answers(f"http://127.0.0.1:{port}", process, seconds), "recalld serve did not answer"


@contextmanager
def uvicorn_thread(app: Any, host: str, port: int, **options: Any) -> Iterator[int]:
    """``app`` under uvicorn on ``host``:``port`` (0: any free port) in a thread of this
    process, for the block; yields the port it listens on, and stops it after."""
    import uvicorn

    runner = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           **options))  # fmt: skip
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not runner.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    assert runner.started, "uvicorn did not start"
    try:
        yield int(runner.servers[0].sockets[0].getsockname()[1])
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
