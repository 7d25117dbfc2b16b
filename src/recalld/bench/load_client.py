"""The load bench's client: one keep-alive HTTP/1.1 connection on a plain socket.

The clients of :func:`recalld.bench.load.measure` run on the machine that serves, so every
millisecond of CPU a client spends on a request is taken from the server under test. A
general client (httpx: its models, header objects, transports and pools) spent 5-6 ms of
CPU a search here, a fifth of what the server spends on one (measured in
docs/design/server-path.md); this one sends a request it built once per question and reads
the answer's head and its ``Content-Length`` bytes, for 0.2-0.3 ms.

Only what the bench needs: loopback (or any host given as ``http://host:port``), requests
with a JSON body, answers with a ``Content-Length`` (every answer of ``recalld serve``). An
answer without one, a broken head, a connection closed mid-answer or a timeout raises
:class:`LoadClientError` (an :class:`OSError`) and drops the connection; the next request
opens a new one. A connection the server closed while it was idle (``recalld serve`` closes
them after 5 s: clients on a slow schedule wait longer between requests) is seen before it
is used, and the request goes on a new one.
"""

from __future__ import annotations

import select
import socket
from urllib.parse import urlsplit

HEAD_MAX_BYTES = 64 * 1024
"""The longest answer head read (``recalld serve``'s heads are a few hundred bytes)."""
READ_BYTES = 256 * 1024
"""How much one read of the socket asks for (a search's answer is about 15 kB)."""


class LoadClientError(OSError):
    """The server's answer could not be read (or the connection failed)."""


class _Unanswered(LoadClientError):
    """The connection ended before any byte of the answer: the request was not read."""


class Answer:
    """An answer's status, the worker that gave it (``x-recalld-worker``) and its body."""

    __slots__ = ("body", "status", "worker")

    def __init__(self, status: int, worker: str, body: bytes) -> None:
        self.status = status
        self.worker = worker
        self.body = body


class Connection:
    """One keep-alive connection to the server at ``url`` (``http://host:port``), opened at
    the first request and again after any failure; ``timeout`` bounds every socket wait."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"the load client needs http://host:port, not {url!r}")
        self._address = (parts.hostname, parts.port)
        self._host = f"{parts.hostname}:{parts.port}".encode()
        self._timeout = timeout
        self._socket: socket.socket | None = None
        self._buffer = b""

    def request(self, method: str, path: str, body: bytes | None = None) -> bytes:
        """The bytes of a request (with ``body`` as JSON), to build once and send often."""
        head = [f"{method} {path} HTTP/1.1".encode(), b"Host: " + self._host]
        if body is not None:
            head += [b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
        return b"\r\n".join(head) + b"\r\n\r\n" + (body or b"")

    def send(self, request: bytes) -> Answer:
        """Send ``request`` (from :meth:`request`) and read its answer.

        Raises:
            LoadClientError: the connection failed or the answer could not be read; the
                connection is closed, and the next call opens a new one.
        """
        if self._socket is not None and self._ended(self._socket):
            self.close()  # the server closed it while idle (its keep-alive timeout)
        reused = self._socket is not None
        try:
            return self._exchange(request)
        except _Unanswered:
            if not reused:
                raise
        # The server closed the kept connection as the request went out (its keep-alive
        # timeout fired first), before any byte of an answer: it never read the request.
        return self._exchange(request)

    def _exchange(self, request: bytes) -> Answer:
        try:
            if self._socket is None:
                self._socket = socket.create_connection(self._address, self._timeout)
                self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._buffer = b""
            self._socket.sendall(request)
            return self._read(self._socket)
        except OSError as error:
            self.close()
            if isinstance(error, LoadClientError):
                raise
            if isinstance(error, ConnectionResetError | BrokenPipeError):
                raise _Unanswered(str(error) or type(error).__name__) from error
            raise LoadClientError(str(error) or type(error).__name__) from error

    def _read(self, sock: socket.socket) -> Answer:
        data = self._buffer
        if not data:
            first = sock.recv(READ_BYTES)
            if not first:
                raise _Unanswered("the server closed the connection before answering")
            data = first
        end = data.find(b"\r\n\r\n")
        while end < 0:
            if len(data) > HEAD_MAX_BYTES:
                raise LoadClientError("the answer's head is too long")
            data += self._more(sock)
            end = data.find(b"\r\n\r\n")
        lines = data[:end].split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise LoadClientError(f"not an HTTP answer: {lines[0][:80]!r}") from None
        length, worker, closing = -1, "", False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise LoadClientError(f"a bad Content-Length: {value[:40]!r}") from None
            elif name == b"x-recalld-worker":
                worker = value.strip().decode("latin-1")
            elif name == b"connection":
                closing = value.strip().lower() == b"close"
        if length < 0:
            raise LoadClientError("the answer has no Content-Length")
        start = end + 4
        while len(data) - start < length:
            data += self._more(sock)
        self._buffer = data[start + length :]
        if closing:
            self.close()
        return Answer(status, worker, data[start : start + length])

    def _ended(self, sock: socket.socket) -> bool:
        """Whether an idle connection was closed by the server (or holds bytes nobody asked
        for): either way it cannot carry the next request. One peek, not waiting."""
        if self._buffer:
            return True
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)

    def _more(self, sock: socket.socket) -> bytes:
        chunk = sock.recv(READ_BYTES)
        if not chunk:
            raise LoadClientError("the server closed the connection")
        return chunk

    def close(self) -> None:
        """Close the connection (a later request opens a new one)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._buffer = b""

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
