"""Thread pools started on first use, for the work one search spreads over the cores, and
whether the cores are free for it.

A forked child has none of its parent's threads, so every pool is forgotten in the child
and started again there when first needed.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

_T = TypeVar("_T")
_U = TypeVar("_U")
_pools: weakref.WeakSet[LazyPool] = weakref.WeakSet()


OWN_LOAD_WINDOW_S = 60.0
"""How far back this process's own CPU use is averaged: the span of the load average it is
taken from."""
_own_samples: deque[tuple[float, float]] = deque()
_own_lock = threading.Lock()


def own_load() -> float:
    """The cores this process kept busy over about the last minute (all its threads' CPU time
    over the time passed; 0 until a second has passed since the first call)."""
    now, cpu = time.monotonic(), time.process_time()
    with _own_lock:
        if not _own_samples or now - _own_samples[-1][0] >= 1.0:  # at most one a second
            _own_samples.append((now, cpu))
        while len(_own_samples) > 1 and now - _own_samples[1][0] >= OWN_LOAD_WINDOW_S:
            _own_samples.popleft()
        since, cpu_then = _own_samples[0]
    span = now - since
    return (cpu - cpu_then) / span if span >= 1.0 else 0.0


def machine_busy() -> bool:
    """Whether other processes' load reaches half the cores: the last minute's load average
    less what this process itself kept busy (a search spread over two threads would
    otherwise count itself as the load that stops it). Then work spread over threads waits
    for cores others hold: a search stays on one thread."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        return False
    return load - own_load() >= (os.cpu_count() or 1) / 2


_in_flight = 0
_in_flight_lock = threading.Lock()


@contextmanager
def searching() -> Iterator[None]:
    """Count a search in flight in this process while the block runs (see :func:`alone`)."""
    global _in_flight
    with _in_flight_lock:
        _in_flight += 1
    try:
        yield
    finally:
        with _in_flight_lock:
            _in_flight -= 1


def alone() -> bool:
    """Whether at most one search (the caller's own) is in flight in this process: a server
    answering several at once has none of its cores to spare for one of them."""
    return _in_flight <= 1


class LazyPool:
    """A :class:`ThreadPoolExecutor` of ``workers`` threads named ``name-N``, started by the
    first :meth:`submit`."""

    def __init__(self, workers: int, name: str) -> None:
        self.workers, self.name = workers, name
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        _pools.add(self)

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            executor = self._executor
        return executor.submit(fn, *args, **kwargs)

    def run_beside(
        self, here: Callable[[], _T], elsewhere: Sequence[Callable[[], _U]]
    ) -> tuple[_T, list[_U]]:
        """Run ``here`` on this thread while each of ``elsewhere`` runs on the pool; both
        results once every call has ended (it never returns or raises while a pool thread
        still works for it)."""
        futures = [self.submit(call) for call in elsewhere]
        try:
            mine = here()
        finally:
            wait(futures)
        return mine, [future.result() for future in futures]

    def _forget(self) -> None:
        self._executor, self._lock = None, threading.Lock()


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
