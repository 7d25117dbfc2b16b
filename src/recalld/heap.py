"""The garbage collector in a process that answers searches for a long time (``recalld
serve``, ``recalld mcp``, the benchmarks that time them, an application embedding the
library): what it loaded at startup kept out of the collector's full passes."""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect once, then freeze every object alive (:func:`gc.freeze`): the modules, the
    model, the open stores. Python's full collection walks every tracked object, about 60k
    once recalld and its model are loaded, and took 12-28 ms each time it ran during a
    search (a few times in 200 searches of a 100k or 1M store); over what was loaded after
    this call it takes under a millisecond. Frozen objects are never collected, so call it
    once startup is done, not per request. Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


__all__ = ["settle"]
