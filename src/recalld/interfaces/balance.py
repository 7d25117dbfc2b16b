"""Kept connections spread evenly over the workers of ``recalld serve --workers N``.

Why: each worker listens on a socket of its own (``SO_REUSEPORT``), and the kernel picks
the worker of a new connection from a hash of its addresses. A client that keeps its
connection stays with that worker, so 32 clients connecting at once were split 16/16 to
8/24, and on a schedule shared evenly by the clients the busier worker answered 59-68 % of
the searches while the other's core idled (docs/design/server-path.md).

How: each worker counts its open connections in a slot of a small memory mapping shared by
all of them, made by the parent before the fork (:class:`Shares`). A worker holding more
than its share (the open connections of all workers divided by their count, rounded up)
answers the request it is answering with ``Connection: close`` (:class:`WorkerHeader`), and
the client opens a new connection, which the kernel places anew. A connection is counted
from its opening until its transport is closing (``connections.BoundedH11``), so a worker
that just asked one client to leave does not ask a second for the same excess.

What it keeps: the request is answered in full first (the header only says the connection
ends after this answer, which every HTTP/1.1 client handles); a client alone, or connections
already spread evenly, are never closed; nothing changes for one worker. The sockets and
their ownership are :mod:`recalld.interfaces.workers`' as before.
"""

from __future__ import annotations

import mmap
import os

from starlette.types import ASGIApp, Message, Receive, Scope, Send

WORKER_HEADER = "X-Recalld-Worker"
"""The header every answer of a multi-process server carries: the answering worker's pid
(which process served a request, for logs and for the tests that check the processes share
one store)."""
SLOT_BYTES = 8
"""One worker's count: a signed 64-bit integer, written only by its worker (an aligned
store, which the others read whole)."""
CLOSE_HEADER = (b"connection", b"close")


class Shares:
    """The open connections of each of ``workers`` processes, in memory they all share
    (made before the fork); :meth:`claim` in a worker names its own slot."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._memory = mmap.mmap(-1, SLOT_BYTES * workers)  # anonymous and shared
        self._counts = memoryview(self._memory).cast("q")
        self._mine = -1

    def claim(self, number: int) -> None:
        """This process is worker ``number`` (from 1): its connections count in its slot."""
        self._mine = number - 1
        self._counts[self._mine] = 0

    def opened(self) -> None:
        """One more connection open in this worker."""
        self._counts[self._mine] += 1

    def closed(self) -> None:
        """One connection of this worker closed (or closing)."""
        self._counts[self._mine] -= 1

    def mine(self) -> int:
        """This worker's open connections."""
        return int(self._counts[self._mine])

    def over(self) -> bool:
        """Whether this worker holds more than its share of all workers' open connections
        (their total divided by the workers, rounded up)."""
        total = sum(self._counts)
        return self._counts[self._mine] > -(-total // self.workers)


class WorkerHeader:
    """Adds :data:`WORKER_HEADER` (this process's id) to every HTTP answer of ``app``, and
    ``Connection: close`` when ``shares`` says this worker holds more than its share."""

    def __init__(self, app: ASGIApp, shares: Shares | None = None) -> None:
        self.app = app
        self.shares = shares
        self.value = str(os.getpid()).encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_pid(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    *message.get("headers", []),
                    (WORKER_HEADER.lower().encode(), self.value),
                ]
                if self.shares is not None and self.shares.over() and CLOSE_HEADER not in headers:
                    headers.append(CLOSE_HEADER)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_pid)
