"""The shell's shortcut: a running local ``recalld serve`` answers for the store it serves.

``recalld serve`` on a loopback address writes a small discovery file to the user's runtime
folder (its port, process id and the store's resolved path) and removes it on exit. The file
is named after a digest of the settings a search depends on, so ``recalld search`` (and
``add`` and ``search --context``) finds the server of exactly its own store, tenant, model
and preset without any configuration, checks that its ``/v1/status`` answers for that
store, and sends the request there: no model to load, no numpy or pydantic to import. When
no such server is up, or it stops answering, the command runs in-process as before.

Only keyless servers are used (a server with API keys answers 401, and the shell runs the
command itself). Cheap to import: the standard library and :mod:`recalld.locations` only;
the requests are spoken over a plain socket (``http.client`` alone would cost the shell more
than a tenth of its start, through the email package it parses headers with).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld.errors import ConflictError, InvalidInputError, NotFoundError
from recalld.locations import default_store, is_dsn, merge_sources

SEARCH_SETTINGS = (
    "db", "tenant", "shared", "embedder", "preset", "llm", "llm_base_url", "reranker",
    "openai_base_url", "openai_dimensions", "int8_queries", "max_content_chars",
)  # fmt: skip
"""The settings a search or an add depends on: a server is used only when it was started
with the same values as the shell resolves."""

CHECK_TIMEOUT_S = 1.0
"""How long the status check may take before the shell runs the command itself."""
CALL_TIMEOUT_S = 600.0


def search_settings(
    overrides: Mapping[str, Any], config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The shell's values of :data:`SEARCH_SETTINGS` (file < environment < flags), with the
    store as an absolute path, as text."""
    values = merge_sources(SEARCH_SETTINGS, overrides, config_file=config_file, environ=environ)
    chosen = {name: values[name] for name in SEARCH_SETTINGS if name in values}
    db = chosen.get("db", default_store())
    chosen["db"] = db if is_dsn(db) else os.path.abspath(os.fspath(db))
    return {k: v if isinstance(v, str) else json.dumps(v, default=str)
            for k, v in chosen.items()}  # fmt: skip


def runtime_dir() -> Path:
    """Where discovery files live: ``$XDG_RUNTIME_DIR/recalld``, or a private folder in the
    temporary directory when the system offers no runtime folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "recalld"
    return Path(tempfile.gettempdir()) / f"recalld-{os.getuid()}"


def _private(path: Path) -> bool:
    """Whether ``path`` is this user's alone: a file another user could write (or a folder
    they made in /tmp first) could point the shell at their server."""
    info = path.stat()
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def discovery_file(settings: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24]
    return runtime_dir() / f"server-{digest}.json"


@contextlib.contextmanager
def advertise(settings: Mapping[str, Any], port: int) -> Iterator[Path | None]:
    """Write the discovery file of a server on 127.0.0.1:``port`` while the block runs."""
    path = discovery_file(settings)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(path.parent):
            raise PermissionError(f"{path.parent} is not this user's private folder")
        record = {"port": port, "pid": os.getpid(), "store": settings["db"],
                  "tenant": settings.get("tenant", "default")}  # fmt: skip
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(record), encoding="utf-8")
        temporary.chmod(0o600)
        temporary.replace(path)
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                path.unlink()


@dataclass(frozen=True)
class LocalServer:
    """A verified local server: requests go to 127.0.0.1:``port``."""

    port: int

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; its JSON answer, or recalld's error for a 4xx answer.

        Raises:
            InvalidInputError, NotFoundError, ConflictError: the server refused the input.
            ServerGone: no usable answer (connection lost, 401, 5xx): run it in-process.
        """
        status, data = _request(self.port, method, path, body, CALL_TIMEOUT_S)
        if status < 300:
            return data
        message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
        if status in (404, 409, 422) and message:
            raise {404: NotFoundError, 409: ConflictError}.get(status, InvalidInputError)(message)
        raise ServerGone(f"the server answered {status}")


class ServerGone(Exception):
    """The local server gave no usable answer; the command runs in-process instead."""


def find(settings: Mapping[str, Any]) -> LocalServer | None:
    """The running server advertised for exactly these settings, if it answers as one."""
    try:
        path = discovery_file(settings)
        if not (_private(path.parent) and _private(path)):
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        port, pid = int(record["port"]), int(record["pid"])
        os.kill(pid, 0)  # a server that died without cleaning up leaves a stale file
        # One round trip: a status answered for this store says the server is up as well.
        status = _request(port, "GET", "/v1/status", None, CHECK_TIMEOUT_S)
    except (OSError, ValueError, KeyError, TypeError, ServerGone):
        return None
    same_store = isinstance(status[1], dict) and (
        status[1].get("store", {}).get("path") == settings["db"] == record.get("store")
    )
    if status[0] != 200 or not same_store:
        return None
    return LocalServer(port)


def _request(port: int, method: str, path: str, body: Any, timeout: float) -> tuple[int, Any]:
    """One HTTP/1.1 exchange with 127.0.0.1:``port`` (connection closed after it): the status
    and the JSON body, or ServerGone when no complete answer came."""
    payload = b"" if body is None else json.dumps(body).encode("utf-8")
    head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close",
            f"Content-Length: {len(payload)}"]  # fmt: skip
    if body is not None:
        head.append("Content-Type: application/json")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + payload)
            received = []
            while chunk := connection.recv(65536):
                received.append(chunk)
        status, text = parse_response(b"".join(received))
        return status, json.loads(text) if text else None
    except (OSError, ValueError) as exc:
        raise ServerGone(str(exc)) from exc


def parse_response(raw: bytes) -> tuple[int, bytes]:
    """The status and body of a whole HTTP/1.1 response read to the connection's end.

    Raises:
        ValueError: not an HTTP response, or its body is shorter than it says.
    """
    header, separator, body = raw.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not separator or not version.startswith("HTTP/1."):
        raise ValueError("no HTTP response")
    status = int(rest.split(" ", 1)[0])
    fields = dict(line.lower().split(":", 1) for line in lines[1:] if ":" in line)
    if fields.get("transfer-encoding", "").strip() == "chunked":
        return status, _unchunk(body)
    length = fields.get("content-length")
    if length is not None and len(body) < int(length):
        raise ValueError(f"the answer ended after {len(body)} of {int(length)} bytes")
    return status, body if length is None else body[: int(length)]


def _unchunk(body: bytes) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line, separator, body = body.partition(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if not separator or len(body) < size:
            raise ValueError("the chunked answer ended early")
        if size == 0:
            return b"".join(parts)
        parts.append(body[:size])
        body = body[size + 2 :]
