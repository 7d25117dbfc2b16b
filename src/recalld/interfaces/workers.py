"""``recalld serve --workers N``: N processes answering on one address (a pre-fork).

Why: a search is mostly Python, and one process runs Python on one core at a time; a
second process serves a second core. MCP over HTTP is stateless and the API keeps no
session, so any worker may answer any request.

How, in order:

1. The parent reads the store's API keys (no model loaded) to choose the address as a
   single server does (:func:`~recalld.interfaces.http.listen_host`), listens on it (one
   socket a worker where the kernel balances them, :data:`BALANCED`, else one shared), and
   raises the descriptor limit (children inherit both).
2. It forks N workers before anything starts a thread. Each builds the app (loading its
   own copy of the model and opening its own connections to the store), tells the parent
   through a pipe that it is ready, and runs uvicorn on its socket.
3. Once every worker is ready the parent says what is served (once) and waits. A signal to
   the parent (SIGTERM, SIGINT, SIGHUP) is passed to every worker as SIGTERM; a worker that
   exits on its own stops the others too (the server is whole or not running), and one
   still running :data:`STOP_TIMEOUT_S` after being asked is killed. A worker whose parent
   is gone (killed outright) stops itself.

Every worker sees the others' writes at once: the store is one SQLite file in WAL mode (or
one PostgreSQL database), and the indexes kept in a worker's memory catch up with the
store before each search (the vector mirror and the ANN index by the ``vectors`` table's
``seq`` and ``vector_generation``, the word index by the store's change log). What is per
worker: the rate limits' buckets, and the model in memory. Each answer carries the worker's
process id in :data:`~recalld.interfaces.balance.WORKER_HEADER`. The kernel places each new
connection on a worker; a worker holding more than its share of the kept connections asks
a client to reconnect (:mod:`recalld.interfaces.balance`).

The parent runs the discovery record's lifetime (written before, removed after), and the
children leave with ``os._exit`` so that nothing of the parent's (that record, its
handlers) is run twice.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, NoReturn

import recalld
from recalld.config import Settings
from recalld.errors import RecalldError
from recalld.interfaces.balance import WORKER_HEADER as WORKER_HEADER, Shares, WorkerHeader
from recalld.interfaces.server_state import ExtensionFactory

STOP_TIMEOUT_S = 30.0
"""How long workers asked to stop may finish their requests before they are killed."""
START_TIMEOUT_S = 600.0
"""How long a worker may take to load the model and open the store before the server gives
up (a first start may download nothing, but a cold disk and a busy machine are slow)."""
POLL_S = 0.2
"""How often the parent looks at its workers (a worker's exit, a stop to pass on)."""
PARENT_CHECK_S = 1.0
"""How often a worker checks that its parent is alive."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class ServeError(RecalldError):
    """The server could not start its workers, or one of them failed."""


@dataclass(frozen=True)
class Plan:
    """What every worker serves: the settings, the address decided by the parent, the
    mounted apps and the shell's secret."""

    settings: Settings
    host: str
    extensions: Sequence[ExtensionFactory]
    access_log: bool
    local_secret: str | None
    uvicorn_options: dict[str, Any]
    shares: Shares | None = None


def serve_workers(
    settings: Settings,
    host: str,
    port: int,
    workers: int,
    *,
    say: Callable[[str], None] = print,
    extensions: Sequence[ExtensionFactory] = (),
    access_log: bool = False,
    local_secret: str | None = None,
) -> int:
    """Serve the HTTP API from ``workers`` processes on one socket until stopped; the exit
    code (0 after a stop asked for by a signal).

    Raises:
        ServeError: ``workers`` below 1, the address cannot be bound, or a worker failed
            before every worker was ready.
    """
    from recalld.interfaces.connections import bounds
    from recalld.interfaces.http import announce, listen_host

    if workers < 1:
        raise ServeError(f"--workers must be at least 1, not {workers}")
    with recalld.open(settings=settings) as root:  # no model: the keys only
        active = root.keys.active()
    host = listen_host(host, active, say)
    options = bounds(say)
    sockets = listeners(host, port, options["backlog"], workers)
    port = sockets[0].getsockname()[1]
    shares = Shares(workers) if workers > 1 else None
    plan = Plan(settings, host, extensions, access_log, local_secret, options, shares)
    # No store connection and no thread is open across the fork.
    with _Workers(workers, sockets, plan) as pool:
        pool.wait_ready()
        with recalld.open(settings=settings) as root:
            announce(settings, host, port, active, root, say)
        say(f"workers: {workers} processes (pids {', '.join(map(str, pool.pids))})")
        return pool.wait()


BALANCED = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
"""Whether each worker gets a socket of its own on the one address (``SO_REUSEPORT``),
among which the kernel spreads new connections evenly (Linux). On one shared socket the
first worker to wake takes every connection waiting, and a client that keeps its
connection open (most do) stays with it: 32 clients connecting at once could all land on
one worker. Elsewhere the workers share one socket."""


def listeners(host: str, port: int, backlog: int, count: int) -> list[socket.socket]:
    """Listening TCP sockets on ``host``:``port`` (0: any free port) for ``count`` workers:
    one each where :data:`BALANCED`, else one for all.

    Raises:
        ServeError: the address cannot be bound (in use, not this machine's).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc}") from exc
    made: list[socket.socket] = []
    try:
        if BALANCED and port:
            # Sockets sharing a port with SO_REUSEPORT let any later one of this user join:
            # first claim the address plainly, so that a server already on it is refused.
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        for _ in range(count if BALANCED else 1):
            listener = socket.socket(family, kind, proto)
            made.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if BALANCED:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            listener.bind(address)
            listener.listen(backlog)
            address = (address[0], listener.getsockname()[1], *address[2:])  # port 0: the same
    except OSError as exc:
        for listener in made:
            listener.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc}") from exc
    return made


class _Workers:
    """The forked workers of one server: started on entry, stopped and reaped on exit."""

    def __init__(self, count: int, sockets: list[socket.socket], plan: Plan) -> None:
        self.count = count
        self.sockets = sockets
        self.plan = plan
        self.children: dict[int, int] = {}  # pid -> worker number
        self.code = 0
        self.stopping = False
        self._ready_read = -1
        self._handlers: dict[int, Any] = {}

    @property
    def pids(self) -> list[int]:
        return sorted(self.children)

    def __enter__(self) -> _Workers:
        sys.stdout.flush()
        sys.stderr.flush()
        ready_read, ready_write = os.pipe()
        self._ready_read = ready_read
        for number in range(1, self.count + 1):
            pid = os.fork()
            if pid == 0:
                os.close(ready_read)
                mine = self.sockets[(number - 1) % len(self.sockets)]
                for other in self.sockets:
                    if other is not mine:
                        other.close()  # a worker gone takes its socket with it
                _worker(number, mine, self.plan, ready_write)
            self.children[pid] = number
        os.close(ready_write)
        for listener in self.sockets:
            listener.close()  # the workers hold them
        self._handlers = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._reap(until=time.monotonic() + STOP_TIMEOUT_S)
        for pid in list(self.children):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self._reap(until=None)
        for number, handler in self._handlers.items():
            signal.signal(number, handler)
        with contextlib.suppress(OSError):
            os.close(self._ready_read)

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Ask every worker to finish (SIGTERM), once."""
        if self.stopping:
            return
        self.stopping = True
        for pid in self.children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)

    def wait_ready(self) -> None:
        """Return once every worker said it is ready.

        Raises:
            ServeError: a worker exited first, a stop was asked for, or the time ran out.
        """
        ready = 0
        deadline = time.monotonic() + START_TIMEOUT_S
        while ready < self.count:
            if self.stopping:
                raise ServeError("stopped before every worker was ready")
            if time.monotonic() > deadline:
                raise ServeError(f"the workers were not ready within {START_TIMEOUT_S:g} s")
            readable, _, _ = select.select([self._ready_read], [], [], POLL_S)
            if readable:
                ready += len(os.read(self._ready_read, self.count))
            exited = self._reap_one()
            if exited is not None:
                if self.stopping:  # our own stop ended it: not a worker's failure
                    raise ServeError("stopped before every worker was ready")
                number, code = exited
                raise ServeError(
                    f"worker {number} exited (code {code}) before serving; its message is above"
                )

    def wait(self) -> int:
        """Wait until every worker has exited; the server's exit code."""
        while self.children:
            exited = self._reap_one()
            if exited is None:
                time.sleep(POLL_S)
                continue
            number, code = exited
            if not self.stopping:
                print(
                    f"worker {number} exited (code {code}): stopping the server",
                    file=sys.stderr,
                    flush=True,
                )
                self.code = code if code > 0 else 1  # killed by a signal: 1
                self.stop()
        return self.code

    def _reap_one(self) -> tuple[int, int] | None:
        """A worker that exited (its number and exit code), reaped; None when none did."""
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            self.children.clear()
            return None
        if pid == 0 or pid not in self.children:
            return None
        return self.children.pop(pid), os.waitstatus_to_exitcode(status)

    def _reap(self, until: float | None) -> None:
        while self.children and (until is None or time.monotonic() < until):
            if self._reap_one() is None:
                time.sleep(POLL_S / 4)


def _worker(number: int, listener: socket.socket, plan: Plan, ready: int) -> NoReturn:
    """The body of worker ``number`` after the fork: serve until stopped, then leave at
    once (``os._exit``), running nothing of the parent's."""
    code = 1
    try:
        # Until it serves, a worker has nothing to finish, and may be inside a C call
        # (a model load, SQLite waiting for another process's lock) where no Python handler
        # runs: SIGTERM ends it there and then. Once it serves, uvicorn stops gracefully on
        # SIGTERM and SIGINT, then raises it again: leave then (_run_worker). A closed
        # terminal's SIGHUP reaches the whole group: the parent turns it into a SIGTERM to
        # each worker, so a worker waits for that one.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _watch_parent(os.getppid())
        code = _run_worker(number, listener, plan, ready)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        code = 0
    except BaseException as exc:
        message = str(exc) if isinstance(exc, RecalldError) else traceback.format_exc()
        print(f"worker {number}: {message}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run_worker(number: int, listener: socket.socket, plan: Plan, ready: int) -> int:
    import uvicorn

    from recalld import heap
    from recalld.interfaces.connections import (
        BoundedServer,
        balanced_protocol,
        redact_access_log,
    )
    from recalld.interfaces.http import create_app

    app = create_app(
        plan.settings,
        host=plan.host,
        extensions=plan.extensions,
        local_secret=plan.local_secret,
    )
    options = dict(plan.uvicorn_options)
    if plan.shares is not None:
        plan.shares.claim(number)
        options["http"] = balanced_protocol(options["http"], plan.shares)
    config = uvicorn.Config(
        WorkerHeader(app, plan.shares),
        log_level="warning",
        access_log=plan.access_log,
        **options,
    )
    heap.settle()
    if plan.access_log:
        redact_access_log()
    signal.signal(signal.SIGTERM, _exit_now)
    os.write(ready, b"1")
    os.close(ready)
    BoundedServer(config).run(sockets=[listener])
    return 0


def _exit_now(number: int, frame: FrameType | None) -> None:
    sys.exit(0)


def _watch_parent(parent: int) -> None:
    """Stop this worker once its parent is gone (it was killed and cannot stop us)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="recalld-parent-watch", daemon=True).start()
