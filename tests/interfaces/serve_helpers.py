"""Run ``recalld serve`` (or any server) on a loopback port from a test."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from recalld.bench.load import answers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


BANNER = " HTTP API on "
"""What ``recalld serve`` says once every worker is ready (a worker may answer before)."""


def wait_until_serving(
    process: subprocess.Popen[Any],
    port: int,
    seconds: float = 60.0,
    said: list[str] | None = None,
) -> None:
    """Return once the server on 127.0.0.1:``port`` answers ``/healthz`` and, given the
    lines its stderr ``said`` (:func:`reading_lines`), once it has said that every worker is
    ready (:data:`BANNER`); fail the test if its process exits first or it takes longer
    than ``seconds`` to answer (a banner still missing then shows in the test's own
    assertions on what it said)."""
    assert answers(f"http://127.0.0.1:{port}", process, seconds), "recalld serve did not answer"
    deadline = time.monotonic() + seconds
    while said is not None and not any(BANNER in line for line in said):
        if time.monotonic() > deadline or process.poll() is not None:
            return
        time.sleep(0.05)


@contextmanager
def reading_lines(stream: Any) -> Iterator[list[str]]:
    """The lines ``stream`` (a process's pipe) gives, gathered by a thread as they come,
    for the block; the list is whole once the process has exited and the block ends."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(stream), daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        reader.join(timeout=10)
        stream.close()


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


SHELL_PROBE = """
import json, sys
from recalld.interfaces.cli import cli
code = 0
try:
    cli.main(sys.argv[1:], prog_name="recalld")
except SystemExit as exc:
    code = exc.code
print("\\nMODULES " + json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
sys.exit(code)
"""
"""The CLI in a fresh interpreter, whose output ends with the top-level modules it imported
(what a shell command had to load: a search served by a local server imports no model)."""


def shell_env(tmp_path: Path, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
              ) -> dict[str, str]:  # fmt: skip
    """The environment of a shell that finds its own local server: a private runtime folder
    (this process looks there too), the fake embedder, a store in ``tmp_path``."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return {**cli_env, "XDG_RUNTIME_DIR": str(runtime), "RECALLD_EMBEDDER": "fake",
            "RECALLD_DB": str(tmp_path / "served.db")}  # fmt: skip


def run_shell(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``recalld ARGS`` through :data:`SHELL_PROBE` with ``env``."""
    return subprocess.run([sys.executable, "-c", SHELL_PROBE, *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def shell_output(done: subprocess.CompletedProcess[str]) -> tuple[str, set[str]]:
    """What the command printed, and the modules it imported."""
    text, _, modules = done.stdout.rpartition("\nMODULES ")
    return text, set(json.loads(modules))
