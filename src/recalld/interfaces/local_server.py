"""The shell's shortcut: a running local ``recalld serve`` answers for the store it serves.

``recalld serve`` on a loopback address advertises itself (:mod:`recalld.interfaces.discovery`:
its address, port, process id, the store's resolved path and a secret, in a file only the
user reads) and removes the record on exit. The file is named after a digest of the settings
a search depends on, so ``recalld search`` (and ``add`` and ``search --context``) finds the
server of exactly its own store, tenant, model and preset without any configuration; on
every connection it first has the server prove it knows the secret, checks that its
``/v1/status`` answers for that store, and sends the request there: no model to load, no
numpy or pydantic to import. When no such server is up, or it stops answering or proving,
the command runs in-process as before.

Only keyless servers are used (a server with API keys answers 401, and the shell runs the
command itself). Cheap to import: the standard library and :mod:`recalld.locations` only;
the requests are spoken over a plain socket (``http.client`` alone would cost the shell more
than a tenth of its start, through the email package it parses headers with).
"""

from __future__ import annotations

import hmac
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld.errors import ConflictError, InvalidInputError, NotFoundError
from recalld.interfaces import discovery
from recalld.interfaces.discovery import (
    advertise as advertise,
    discovery_file as discovery_file,
    runtime_dir as runtime_dir,
)
from recalld.locations import default_store, is_dsn, merge_sources

SEARCH_SETTINGS = (
    "db",
    "tenant",
    "shared",
    "embedder",
    "preset",
    "llm",
    "llm_base_url",
    "reranker",
    "openai_base_url",
    "openai_dimensions",
    "int8_queries",
    "max_content_chars",
)
"""The settings a search or an add depends on: a server is used only when it was started
with the same values as the shell resolves."""

CHECK_TIMEOUT_S = 1.0
"""How long the status check may take before the shell runs the command itself."""
CALL_TIMEOUT_S = 600.0
MAX_HEAD_BYTES = 16 * 1024
"""The longest response head the handshake reads (the server's is a few hundred bytes)."""


def search_settings(
    overrides: Mapping[str, Any],
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The shell's values of :data:`SEARCH_SETTINGS` (file < environment < flags), with the
    store as an absolute path, as text."""
    values = merge_sources(SEARCH_SETTINGS, overrides, config_file=config_file, environ=environ)
    chosen = {name: values[name] for name in SEARCH_SETTINGS if name in values}
    db = chosen.get("db", default_store())
    chosen["db"] = db if is_dsn(db) else os.path.abspath(os.fspath(db))
    return {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in chosen.items()}


@dataclass(frozen=True)
class LocalServer:
    """A verified local server: requests go to ``host``:``port``, each on a connection whose
    other end first proved it knows ``secret``."""

    host: str
    port: int
    secret: str

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; its JSON answer, or recalld's error for a 4xx answer.

        Raises:
            InvalidInputError, NotFoundError, ConflictError: the server refused the input.
            ServerGone: no usable answer (connection lost, no proof, 401, 5xx): run it
                in-process.
        """
        status, data = _request(self, method, path, body, CALL_TIMEOUT_S)
        if status < 300:
            return data
        message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
        if status in (404, 409, 422) and message:
            raise {404: NotFoundError, 409: ConflictError}.get(status, InvalidInputError)(message)
        raise ServerGone(f"the server answered {status}")


class ServerGone(Exception):
    """The local server gave no usable answer; the command runs in-process instead."""


def find(settings: Mapping[str, Any]) -> LocalServer | None:
    """The running server advertised for exactly these settings, if it proves the secret
    and answers as one."""
    record = discovery.read(settings)
    if record is None:
        return None
    server = LocalServer(record.host, record.port, record.secret)
    try:
        # One connection: the proof, then a status answered for this store.
        status = _request(server, "GET", "/v1/status", None, CHECK_TIMEOUT_S)
    except ServerGone:
        return None
    same_store = isinstance(status[1], dict) and (
        status[1].get("store", {}).get("path") == settings["db"] == record.store
    )
    return server if status[0] == 200 and same_store else None


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _request(
    server: LocalServer, method: str, path: str, body: Any, timeout: float
) -> tuple[int, Any]:
    """One HTTP/1.1 exchange with the server, after it proved the secret on the same
    connection (closed after it): the status and the JSON body, or ServerGone when no
    proof or no complete answer came. Nothing of the request is sent before the proof."""
    payload = b"" if body is None else json.dumps(body).encode("utf-8")
    where = _authority(server.host, server.port)
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: {where}",
        "Connection: close",
        f"{discovery.SECRET_HEADER}: {server.secret}",
        f"Content-Length: {len(payload)}",
    ]
    if body is not None:
        head.append("Content-Type: application/json")
    try:
        with socket.create_connection((server.host, server.port), timeout=timeout) as connection:
            _handshake(connection, server, where)
            connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + payload)
            received = []
            while chunk := connection.recv(65536):
                received.append(chunk)
        status, text = parse_response(b"".join(received))
        return status, json.loads(text) if text else None
    except (OSError, ValueError) as exc:
        raise ServerGone(str(exc)) from exc


def _handshake(connection: socket.socket, server: LocalServer, where: str) -> None:
    """Have the other end prove it knows the secret, on this kept-alive connection.

    Raises:
        ValueError: no proof, or a wrong one.
    """
    challenge = discovery.new_challenge()
    hello = f"GET {discovery.HELLO_PATH}?challenge={challenge} HTTP/1.1\r\nHost: {where}\r\n\r\n"
    connection.sendall(hello.encode("ascii"))
    status, text = read_one_response(connection)
    answer = json.loads(text) if status == 200 else {}
    given = answer.get("proof") if isinstance(answer, dict) else None
    if not isinstance(given, str) or not hmac.compare_digest(
        given, discovery.proof(server.secret, challenge)
    ):
        raise ValueError("the server on the advertised address did not prove the secret")


def read_one_response(connection: socket.socket) -> tuple[int, bytes]:
    """One response with a ``Content-Length`` read off a kept-alive connection.

    Raises:
        ValueError: not an HTTP response, no length, or the connection ended early.
    """
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = connection.recv(4096)
        if not chunk or len(raw) > MAX_HEAD_BYTES:
            raise ValueError("no HTTP response")
        raw += chunk
    header, _, body = raw.partition(b"\r\n\r\n")
    fields = dict(
        line.lower().split(":", 1)
        for line in header.decode("latin-1").split("\r\n")[1:]
        if ":" in line
    )
    length = int(fields.get("content-length", "-1"))
    if length < 0 or length > MAX_HEAD_BYTES:
        raise ValueError("the handshake's answer has no usable length")
    while len(body) < length:
        chunk = connection.recv(length - len(body))
        if not chunk:
            raise ValueError("the handshake's answer ended early")
        body += chunk
    status, _ = parse_response(header + b"\r\n\r\n" + body[:length])
    return status, body[:length]


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
