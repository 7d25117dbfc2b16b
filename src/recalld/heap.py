"""The garbage collector in a process that answers searches for a long time (``recalld
serve``, ``recalld mcp``, the benchmarks that time them, an application embedding the
library): what it loaded at startup kept out of the collector's full passes."""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5000
"""Container objects allocated (less those freed) between two collections of the youngest
generation, from :func:`settle` on; Python's default is 700. A search nets a few thousand
(its candidates' records, their factor dicts, the trace), so at 700 the collector ran about
twice a search, walking the search's young objects each time and then, every tenth pass,
the older ones: 0.63-0.73 ms of collector CPU a search at 10k
(docs/design/search-cpu-gc.md). At 5,000 it runs about once in 40 searches; garbage cycles
wait for it no longer than that, and hold no more than their few thousand objects."""


def settle() -> int:
    """Collect once, then freeze every object alive (:func:`gc.freeze`): the modules, the
    model, the open stores. Python's full collection walks every tracked object, about 60k
    once recalld and its model are loaded, and took 12-28 ms each time it ran during a
    search (a few times in 200 searches of a 100k or 1M store); over what was loaded after
    this call it takes under a millisecond. Frozen objects are never collected, so call it
    once startup is done, not per request. The youngest generation is then collected
    every :data:`YOUNG_THRESHOLD` objects (or the process's own larger setting). Returns
    how many objects are frozen."""
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    if 0 < young < YOUNG_THRESHOLD:  # 0: the collector was turned off; leave it so
        gc.set_threshold(YOUNG_THRESHOLD, *older)
    return gc.get_freeze_count()


__all__ = ["settle"]
