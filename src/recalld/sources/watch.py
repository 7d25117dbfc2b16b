"""Keeping the index in step with a workspace: poll, debounce, re-index.

Polling (``stat`` of the matched files, as :mod:`.discover` does) rather than OS events:
it needs no extra dependency, behaves the same on every platform and network drive, and a
memory workspace is small enough that a scan each second costs next to nothing. Each
re-index is the ordinary incremental, crash-safe run, so stopping at any moment is safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recalld.sources.discover import scan_root
from recalld.sources.indexer import IndexReport
from recalld.stores.base import SourceRoot

POLL_SECONDS = 1.0
"""How often the workspace is scanned for changes."""
DEBOUNCE_SECONDS = 0.5
"""How long the files must stay unchanged before a re-index (an editor saving in several
writes, or a burst of files, then costs one run)."""

Snapshot = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class WatchOptions:
    """Timing of a watch; ``max_seconds`` bounds it (tests, cron jobs)."""

    interval: float = POLL_SECONDS
    debounce: float = DEBOUNCE_SECONDS
    max_seconds: float | None = None


def snapshot(roots: Sequence[SourceRoot]) -> Snapshot:
    """Size and modification time of every file the roots' globs match."""
    out: Snapshot = {}
    for root in roots:
        for f in scan_root(root.path, root.globs).files:
            out[f.path] = (f.size, f.mtime_ns)
    return out


def watch(
    run_index: Callable[[], IndexReport],
    take_snapshot: Callable[[], Snapshot],
    on_report: Callable[[IndexReport], None],
    options: WatchOptions,
    stop: threading.Event | None = None,
) -> int:
    """Index once, then again after each settled change, until ``stop`` or the time bound.

    Returns:
        How many index runs were made (the first included).
    """
    stop = stop or threading.Event()
    deadline = None if options.max_seconds is None else time.monotonic() + options.max_seconds

    def wait(seconds: float) -> bool:
        """Sleep; False once it is time to stop."""
        if deadline is not None:
            seconds = min(seconds, max(0.0, deadline - time.monotonic()))
        return not stop.wait(seconds) and (deadline is None or time.monotonic() < deadline)

    last = take_snapshot()
    on_report(run_index())
    runs = 1
    while wait(options.interval):
        current = take_snapshot()
        if current == last:
            continue
        while wait(options.debounce):  # settle: wait until a scan sees no further change
            again = take_snapshot()
            if again == current:
                break
            current = again
        else:
            break
        last = current
        on_report(run_index())
        runs += 1
    return runs
