"""The shell's discovery of a local server cannot be captured: a foreign listener on the
advertised port receives nothing of a request, and the record names the address the
server really took, in a file only the user reads."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import free_port, run_shell, shell_env, shell_output

from recalld.interfaces import discovery, local_server

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path: Path, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
        ) -> dict[str, str]:  # fmt: skip
    return shell_env(tmp_path, cli_env, monkeypatch)


def shell(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = run_shell(env, *args)
    return done, shell_output(done)[1]


class Foreign:
    """Another user's listener on ``host``:``port``: keeps every byte it is sent and answers
    each request with a made-up 200 (a proof it cannot compute, forged hits)."""

    def __init__(self, host: str, port: int) -> None:
        self.received = b""
        self.listener = socket.create_server((host, port))
        self.listener.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        forged = json.dumps({"proof": "0" * 64, "hits": [], "store": {}}).encode()
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(1.0)
                try:
                    while chunk := connection.recv(65536):
                        self.received += chunk
                        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json"
                                           b"\r\nContent-Length: %d\r\n\r\n%s"
                                           % (len(forged), forged))  # fmt: skip
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.listener.close()


@pytest.fixture
def foreign_port() -> Iterator[tuple[Foreign, int]]:
    port = free_port()
    listener = Foreign("127.0.0.1", port)
    try:
        yield listener, port
    finally:
        listener.close()


def test_a_foreign_listener_on_the_advertised_port_receives_nothing(
    env: dict[str, str], foreign_port: tuple[Foreign, int]
) -> None:
    listener, port = foreign_port
    settings = local_server.search_settings({}, environ=env)
    # The record of a server that stopped, whose port another user then bound (the record's
    # process is alive: this one).
    with discovery.advertise(settings, "127.0.0.1", port, discovery.new_secret()) as path:
        assert path is not None
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
        added, modules = shell(env, "add", "my new PIN is 9321")
        found, _ = shell(env, "--json", "search", "what is my PIN")
    assert added.returncode == 0 and "numpy" in modules, added.stderr  # ran in-process
    assert found.returncode == 0, found.stderr
    hits = json.loads(shell_output(found)[0])["hits"]
    assert hits and hits[0]["memory"]["content"] == "my new PIN is 9321"  # not forged
    assert listener.received, "the shell never dialled the advertised port"
    assert b"PIN" not in listener.received and b"9321" not in listener.received
    secret_header = discovery.SECRET_HEADER.lower().encode()
    assert secret_header not in listener.received.lower()
    assert listener.received.startswith(b"GET " + discovery.HELLO_PATH.encode())


def test_the_shell_dials_the_address_the_server_took(
    env: dict[str, str], recalld_command: list[str], foreign_port: tuple[Foreign, int]
) -> None:
    """A server on 127.0.0.2 while another user holds 127.0.0.1 on the same port."""
    listener, port = foreign_port
    assert shell(env, "add", "The staging database moved to port 6543.")[0].returncode == 0
    process = subprocess.Popen([*recalld_command, "serve", "--host", "127.0.0.2", "--port",
                                str(port)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)  # fmt: skip
    settings = local_server.search_settings({}, environ=env)
    try:
        deadline = time.monotonic() + 90
        while local_server.find(settings) is None:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the server never came up"
            time.sleep(0.2)
        record = discovery.read(settings)
        assert record is not None and record.host == "127.0.0.2" and record.pid == process.pid
        found, modules = shell(env, "--json", "search", "staging database port")
        assert found.returncode == 0 and "numpy" not in modules, found.stderr  # the server
        assert "port 6543" in found.stdout
        assert listener.received == b""
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def test_the_server_refuses_a_wrong_secret_and_proves_the_right_one(
    env: dict[str, str], recalld_command: list[str]
) -> None:
    port = free_port()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    process = subprocess.Popen([*recalld_command, "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=lambda: resource.setrlimit(
                                   resource.RLIMIT_NOFILE, (1024, hard)))  # fmt: skip
    settings = local_server.search_settings({}, environ=env)
    try:
        deadline = time.monotonic() + 90
        while (server := local_server.find(settings)) is None:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        # It raised its own soft descriptor limit to the hard one.
        limits = Path(f"/proc/{process.pid}/limits")
        if limits.exists() and hard != resource.RLIM_INFINITY:
            (line,) = [x for x in limits.read_text().splitlines() if "open files" in x]
            assert line.split()[3] == str(hard), line
        assert server.call("GET", "/v1/status")["store"]["path"] == env["RECALLD_DB"]
        wrong = local_server.LocalServer(server.host, server.port, "f" * 64)
        with pytest.raises(local_server.ServerGone, match="did not prove"):
            wrong.call("GET", "/v1/status")
        # The proof checked, a wrong secret sent anyway: refused.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.sendall(f"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               f"{discovery.SECRET_HEADER}: {'f' * 64}\r\nConnection: close"
                               "\r\n\r\n".encode())  # fmt: skip
            assert connection.recv(100).startswith(b"HTTP/1.1 401")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert not os.listdir(Path(env["XDG_RUNTIME_DIR"]) / "recalld")


EXHAUSTED = """
import os, resource, sys
from pathlib import Path
from recalld.interfaces import discovery
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
with discovery.advertise({"db": sys.argv[1]}, "127.0.0.1", 9, discovery.new_secret()) as path:
    assert path is not None and path.is_file()
    try:
        while True:
            held.append(open(os.devnull))
    except OSError:
        pass  # no descriptor left, as when a flood exhausted them
for handle in held:
    handle.close()
print("LEFT" if path.exists() else "REMOVED")
"""


def test_the_record_is_removed_even_with_no_descriptor_left(env: dict[str, str],
                                                             tmp_path: Path) -> None:  # fmt: skip
    done = subprocess.run([sys.executable, "-c", EXHAUSTED, str(tmp_path / "x.db")], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.stdout.strip() == "REMOVED", (done.stdout, done.stderr)
