"""The shell uses a running local `recalld serve` of its own store, found without settings."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from serve_helpers import free_port, run_shell, shell_env, shell_output, wait_until_serving

from recalld.interfaces import discovery, local_server

pytestmark = pytest.mark.integration

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def env(tmp_path: Path, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
        ) -> dict[str, str]:  # fmt: skip
    return shell_env(tmp_path, cli_env, monkeypatch)


@pytest.fixture
def run(env: dict[str, str]) -> Run:
    """The CLI in a fresh interpreter; stdout ends with the modules it imported."""

    def _run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return run_shell({**env, **extra}, *args)

    return _run


@pytest.fixture
def server(env: dict[str, str], recalld_command: list[str], run: Run) -> Iterator[int]:
    assert run("add", "Pinning psycopg to 3.2 fixed the billing deploy.").returncode == 0
    port = free_port()
    process = subprocess.Popen([*recalld_command, "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    settings = local_server.search_settings({}, environ=env)
    deadline = time.monotonic() + 90
    while local_server.find(settings) is None:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the server never came up"
        time.sleep(0.2)
    yield port
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    if process.stderr is not None:
        process.stderr.close()


HEAVY_ON_THE_WAY = {"pydantic", "numpy", "onnxruntime", "tokenizers", "fastapi", "uvicorn", "mcp",
                    "http", "email"}  # fmt: skip
"""What a search through the server must not import (``http.client`` alone, through the email
package, would cost the shell a sixth of its start)."""


def test_search_add_and_context_go_through_the_server(
    server: int, run: Run, env: dict[str, str]
) -> None:
    found = run("--json", "search", "psycopg deploy", "--explain")
    text, modules = shell_output(found)
    assert found.returncode == 0, found.stderr
    assert not modules & HEAVY_ON_THE_WAY, sorted(modules & HEAVY_ON_THE_WAY)
    hits = json.loads(text)["hits"]
    assert hits[0]["memory"]["content"].startswith("Pinning psycopg") and hits[0]["trace"]
    human, modules = shell_output(run("search", "psycopg deploy"))
    assert "Pinning psycopg" in human and "1 hit(s)" in human and "numpy" not in modules
    assert not modules & HEAVY_ON_THE_WAY, sorted(modules & HEAVY_ON_THE_WAY)
    added, modules = shell_output(run("add", "The staging database moved to port 6543."))
    assert added.startswith("stored ") and "pydantic" not in modules
    context, modules = shell_output(run("search", "staging database port", "--context", "200"))
    assert "port 6543" in context and "numpy" not in modules
    refused = run("search", "x", "--limit", "0")
    assert refused.returncode == 2 and "limit must be between 1 and 1000" in refused.stderr
    # The same answer as in-process: another tenant's shell does not use this server.
    alone, modules = shell_output(run("--json", "search", "staging database port",
                                RECALLD_TENANT="default", RECALLD_PRESET="balanced"))  # fmt: skip
    assert "numpy" in modules  # other settings given: the shell ran it itself
    assert json.loads(alone)["hits"][0]["memory"]["content"].startswith("The staging database")


def test_the_server_of_another_store_is_never_used(
    server: int, run: Run, env: dict[str, str], tmp_path: Path
) -> None:
    other = tmp_path / "other.db"
    assert run("add", "only in the other store", RECALLD_DB=str(other)).returncode == 0
    # A discovery file for the other store that points at the running server (as a stale
    # file whose port was taken over would): the store check refuses it.
    settings = local_server.search_settings({}, environ={**env, "RECALLD_DB": str(other)})
    served = discovery.read(local_server.search_settings({}, environ=env))
    assert served is not None
    with discovery.advertise(settings, "127.0.0.1", server, served.secret) as written:
        assert written is not None and written.is_file()
        found = run("--json", "search", "store", RECALLD_DB=str(other))
    text, modules = shell_output(found)
    assert "numpy" in modules
    assert [h["memory"]["content"] for h in json.loads(text)["hits"]] == [
        "only in the other store"]  # fmt: skip


def test_a_stopped_server_leaves_no_file_and_the_shell_runs_alone(
    env: dict[str, str], recalld_command: list[str], run: Run
) -> None:
    assert run("add", "a memory before the server").returncode == 0
    runtime = Path(env["XDG_RUNTIME_DIR"]) / "recalld"
    port = free_port()
    process = subprocess.Popen([*recalld_command, "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 90
    while not (runtime.is_dir() and list(runtime.iterdir())):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
    (record,) = runtime.iterdir()
    assert json.loads(record.read_text())["store"] == env["RECALLD_DB"]
    assert record.stat().st_mode & 0o077 == 0
    # Stopped once it serves (the file is written while the model still loads).
    wait_until_serving(process, port, max(deadline - time.monotonic(), 1.0))
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    assert list(runtime.iterdir()) == []
    text, modules = shell_output(run("--json", "search", "memory before"))
    assert json.loads(text)["hits"][0]["memory"]["content"] == "a memory before the server"
    assert "numpy" in modules


def test_answers_are_read_whole_or_refused() -> None:
    plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"
    assert local_server.parse_response(plain) == (200, b"{}")
    chunked = (b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3\r\n{\"a\r\n5;ext=1\r\n\": 1}\r\n0\r\n\r\n")  # fmt: skip
    assert local_server.parse_response(chunked) == (404, b'{"a": 1}')
    with pytest.raises(ValueError, match="ended after 1 of 2 bytes"):
        local_server.parse_response(plain[:-1])
    with pytest.raises(ValueError, match="chunked answer ended early"):
        local_server.parse_response(chunked[:-12])
    with pytest.raises(ValueError, match="no HTTP response"):
        local_server.parse_response(b"SSH-2.0-OpenSSH_9.6\r\n")
