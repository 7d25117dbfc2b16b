"""Thread pools started on first use, for the work one search spreads over the cores, and
whether the cores are free for it.

A forked child has none of its parent's threads, so every pool is forgotten in the child
and started again there when first needed.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")
_pools: weakref.WeakSet[LazyPool] = weakref.WeakSet()


def machine_busy() -> bool:
    """Whether the last minute's load average reaches half the cores. Then work spread over
    threads waits for cores other processes hold: a query is embedded on one thread that
    does not spin (``providers/onnx.py``), and a search stays on one thread."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        return False
    return load >= (os.cpu_count() or 1) / 2


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

    def _forget(self) -> None:
        self._executor, self._lock = None, threading.Lock()


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
