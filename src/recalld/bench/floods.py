"""Connection floods against ``recalld serve`` on loopback: the connections, a ``/healthz``
asked over a plain socket, and whether the server has closed a connection.

Shared by ``scripts/reliability_floods.py`` (the reliability run) and
``tests/interfaces/test_http_floods.py``.
"""

from __future__ import annotations

import contextlib
import socket

HALF_SENT_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
"""A request head stopped in the middle of a header: the server waits for the rest."""
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
CLOSED_WITHIN_S = 0.05
"""How long to wait for a connection's end of stream before taking it as still open."""


def open_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to 127.0.0.1:``port``, every other one stopped in the middle of
    a request head and the others silent; the caller closes them. A refused connection is
    skipped: the server's choice, not a failure."""
    held = []
    for i in range(count):
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            continue
        if i % 2:
            with contextlib.suppress(OSError):
                connection.sendall(HALF_SENT_HEAD)
        held.append(connection)
    return held


def healthz(port: int) -> bytes:
    """``GET /healthz`` over a plain socket (what it costs the server, not a client's setup):
    the first bytes of the answer, or the error's repr."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.sendall(HEALTHZ)
            return connection.recv(4096)
    except OSError as exc:
        return repr(exc).encode()


def closed_by_server(connection: socket.socket) -> bool:
    """Whether the server has closed ``connection`` (an end of stream or a reset)."""
    connection.settimeout(CLOSED_WITHIN_S)
    try:
        return connection.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True
