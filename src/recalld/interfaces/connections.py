"""What one connection may hold of ``recalld serve``: a bounded number of them, a short time
to send a request head, and the process's descriptors never exhausted by idle sockets.

Invariants:

- At most :func:`connection_cap` connections are open at once. A connection over the cap
  evicts the oldest one still waiting for a request head (an idle or half-sent one); when
  every open connection is inside a request, the new one is closed at once. So a flood of
  idle sockets never keeps a real client out, and never reaches the descriptor limit.
- A connection sends a whole request head within :data:`HEADER_TIMEOUT_S` of opening (or
  of its previous answer, on keep-alive), and a body it started never pauses longer than
  :data:`BODY_IDLE_S`; otherwise it is closed.
- A head larger than :data:`MAX_HEAD_BYTES` is answered 431 (414 when the request line
  alone is), read to its end rather than reset.
- Running out of descriptors anyway (another part of the process holding them) is logged
  in one line and never ends the server: asyncio pauses accepting for a second and the
  logger needs no file to say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from recalld.interfaces.balance import Shares

HEADER_TIMEOUT_S = 5.0
"""A local client sends its request head at once; one that has not within this many seconds
of connecting (or of its previous answer) is holding a socket for nothing."""
BODY_IDLE_S = 10.0
"""The longest pause inside a request body: a 10 MB body over loopback takes milliseconds."""
DESCRIPTOR_RESERVE = 256
"""Descriptors kept for everything but client connections: the store and its WAL, the word
index's segment files, the model, the log and the worker threads' own."""
MAX_BACKLOG = 2048
"""The listen backlog with descriptors to spare (uvicorn's own): a burst of connections
waits in the kernel instead of being refused. asyncio accepts up to this many at one
wake-up before any of them is counted against the cap, so it shrinks with the limit."""
MAX_CONNECTIONS = 4096
"""The most connections served at once even with descriptors to spare: far above what a
machine's clients need, and each costs a socket and a little memory."""
MAX_HEAD_BYTES = 64 * 1024
"""The largest request line plus headers: a search never needs more than a few hundred
bytes of them (the request goes in the body); 40,000 query parameters are refused here."""
LINGER_S = 1.0
"""How long a refused connection's remaining input is read and dropped before it is closed:
closing with unread input would reset the connection and lose the refusal."""

UNLIMITED_TARGET = 65536
"""The soft limit asked for when the hard one is unlimited: room for :data:`MAX_CONNECTIONS`
many times over."""

WARN_EVERY_S = 10.0
"""How often a lack of descriptors is logged: once says it, a line per retry floods the log."""

log = logging.getLogger("recalld.http")
_last_warning = [float("-inf")]


def raise_descriptor_limit() -> int:
    """Raise this process's soft descriptor limit to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else UNLIMITED_TARGET
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def backlog(descriptors: int) -> int:
    """The listen backlog under a soft limit of ``descriptors``."""
    return max(64, min(MAX_BACKLOG, (descriptors - DESCRIPTOR_RESERVE) // 4))


def connection_cap(descriptors: int) -> int:
    """The most connections served at once under a soft limit of ``descriptors``: what the
    reserve leaves, less two accept bursts not yet counted."""
    spare = descriptors - DESCRIPTOR_RESERVE - 2 * backlog(descriptors)
    return max(16, min(MAX_CONNECTIONS, spare))


def quiet_exhaustion(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's error handler: a lack of descriptors or memory at ``accept()`` is
    one line in the log (a traceback would need source files opened, which fails then);
    anything else goes to asyncio's own handler."""
    if "out of system resource" in str(context.get("message", "")):
        now = time.monotonic()
        if now - _last_warning[0] >= WARN_EVERY_S:
            _last_warning[0] = now
            log.warning(
                "accept() failed (%s): new connections wait a second", context.get("exception")
            )
        return
    loop.default_exception_handler(context)


def preload_logging() -> None:
    """Import now what a log record may import when written (Rich's traceback, when Rich
    writes the log): with no descriptor free, that import would fail inside the logger."""
    if "rich.logging" in sys.modules or "rich" in sys.modules:
        with contextlib.suppress(ImportError):
            import rich.traceback  # noqa: F401


class BoundedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol under this module's bounds. One subclass a server
    (:func:`bounded_protocol`) holds the cap and the connections owing a request head, oldest
    first; its config sets ``h11_max_incomplete_event_size`` above :data:`MAX_HEAD_BYTES`, so
    that the 431 here answers first."""

    cap = MAX_CONNECTIONS
    waiting: dict[BoundedH11, None]
    shares: Shares | None = None
    """Where a worker of several counts its open connections (:mod:`.balance`)."""
    _timer: asyncio.TimerHandle | None = None
    _since = 0.0
    _lingering = False
    _counted = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self.shares is not None:
            self.shares.opened()
            self._counted = True
        super().connection_made(transport)
        if len(self.connections) > self.cap and not self._evict_oldest():
            transport.abort()
            return
        self._await_head()

    def data_received(self, data: bytes) -> None:
        self._since = time.monotonic()
        if not self._lingering:
            super().data_received(data)

    def handle_events(self) -> None:
        if self._refuse_large_head():
            return
        super().handle_events()
        if self in self.waiting and self.conn.their_state is not h11.IDLE:
            del self.waiting[self]  # the head arrived: the body's pauses are watched now

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            self._uncount()  # closing after this answer: no longer this worker's to hold
        elif self.conn.their_state is h11.IDLE:
            self._await_head()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # The connection leaves this protocol (a WebSocket one takes it, where a WebSocket
        # library is installed): its connection_lost is no longer called here.
        self._uncount()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._uncount()
        self.waiting.pop(self, None)
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def _uncount(self) -> None:
        if self._counted and self.shares is not None:
            self._counted = False
            self.shares.closed()

    def drop(self) -> None:
        self.waiting.pop(self, None)
        self.transport.abort()

    def _evict_oldest(self) -> bool:
        for oldest in self.waiting:
            oldest.drop()
            return True
        return False

    def _await_head(self) -> None:
        self.waiting.pop(self, None)
        self.waiting[self] = None
        self._since = time.monotonic()
        self._arm(HEADER_TIMEOUT_S)

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(seconds, self._overdue)

    def _overdue(self) -> None:
        if self.transport.is_closing():
            return
        if self in self.waiting or self._lingering:
            self.drop()
        elif self.conn.their_state is h11.SEND_BODY:
            quiet = time.monotonic() - self._since
            if quiet >= BODY_IDLE_S:
                self.drop()
            else:
                self._arm(BODY_IDLE_S - quiet)
        else:  # inside a request: look again once its answer could be done
            self._arm(BODY_IDLE_S)

    def _refuse_large_head(self) -> bool:
        """Answer a head over :data:`MAX_HEAD_BYTES` with 431 (414: the request line alone
        is too long) and read what follows until the client closes."""
        if self.conn.their_state is not h11.IDLE:
            return False
        buffered, _closed = self.conn.trailing_data
        if len(buffered) <= MAX_HEAD_BYTES or b"\r\n\r\n" in buffered[: MAX_HEAD_BYTES + 4]:
            return False  # a whole head, perhaps with its body: h11 reads it
        line_end = buffered.find(b"\r\n")
        status = 414 if line_end < 0 or line_end > MAX_HEAD_BYTES else 431
        what = "the request line is too long" if status == 414 else "the headers are too large"
        self._refuse(
            status, f"{what} (at most {MAX_HEAD_BYTES} bytes); send parameters in a JSON body"
        )
        return True

    def _refuse(self, status: int, message: str) -> None:
        code, reason = REFUSALS[status]
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % (status, reason, len(body)) + body
        )
        self.waiting.pop(self, None)
        self._lingering = True
        with contextlib.suppress(OSError, RuntimeError, NotImplementedError):
            self.transport.write_eof()
        self._arm(LINGER_S)


REFUSALS = {
    414: ("uri_too_long", b"URI Too Long"),
    431: ("headers_too_large", b"Request Header Fields Too Large"),
}


def bounded_protocol(cap: int) -> type[BoundedH11]:
    """A protocol class of one server: at most ``cap`` connections."""
    return type("Bounded", (BoundedH11,), {"cap": cap, "waiting": {}})


def balanced_protocol(protocol: type[BoundedH11], shares: Shares) -> type[BoundedH11]:
    """``protocol`` (of :func:`bounded_protocol`) counting its connections in ``shares``."""
    return type("Balanced", (protocol,), {"shares": shares})


def bounds(say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The uvicorn settings of a server under these bounds (the descriptor limit raised
    first); says the connection cap when the limit is low."""
    descriptors = raise_descriptor_limit()
    cap = connection_cap(descriptors)
    preload_logging()
    if say is not None and cap < MAX_CONNECTIONS:
        say(f"connections: at most {cap} at once ({descriptors} file descriptors allowed)")
    return {
        "http": bounded_protocol(cap),
        "timeout_keep_alive": int(HEADER_TIMEOUT_S),
        "h11_max_incomplete_event_size": 2 * MAX_HEAD_BYTES,
        "backlog": backlog(descriptors),
    }


class BoundedServer(uvicorn.Server):
    """The uvicorn server with :func:`quiet_exhaustion` as its event loop's error handler."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(quiet_exhaustion)
        await super().serve(sockets)


class _NoQuery(logging.Filter):
    """Drops the query string from uvicorn's access lines: it may carry what a user searched
    or filtered by (``?tag=...&project=...``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            path, mark, _query = args[2].partition("?")
            record.args = (*args[:2], path + ("?..." if mark else ""), *args[3:])
        return True


def redact_access_log() -> None:
    """Turn on uvicorn's access lines (INFO; the rest of its log stays at WARNING), without
    query strings."""
    access = logging.getLogger("uvicorn.access")
    access.setLevel(logging.INFO)
    if not any(isinstance(f, _NoQuery) for f in access.filters):
        access.addFilter(_NoQuery())
