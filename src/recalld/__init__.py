"""recalld: a memory retrieval engine for AI agents.

>>> import recalld
>>> with recalld.open("memory.db") as memory:          # doctest: +SKIP
...     memory.add("I moved to Berlin in March 2024.")
...     memory.search("where do I live?")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recalld.config import Settings, load_settings
    from recalld.engine import (
        MemoryEngine,
        Status,
        open_engine as open,  # noqa: A004 - the facade's entry point
    )
    from recalld.errors import (
        EmbedderError,
        EmbedderMismatchError,
        InvalidInputError,
        NotFoundError,
        RecalldError,
        StoreError,
    )
    from recalld.migration import MigrationReport, migrate_store
    from recalld.records import (
        AddResult,
        ChannelHit,
        Collection,
        Context,
        FileSet,
        Hit,
        InCollection,
        IndexedFile,
        Memory,
        MemoryFilter,
        NewMemory,
        SearchResult,
        Source,
        TimeRange,
        Trace,
    )
    from recalld.retrieval.config import PRESETS, RetrievalConfig

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AddResult",
    "ChannelHit",
    "Collection",
    "Context",
    "EmbedderError",
    "EmbedderMismatchError",
    "FileSet",
    "Hit",
    "InCollection",
    "IndexedFile",
    "InvalidInputError",
    "Memory",
    "MemoryEngine",
    "MemoryFilter",
    "MigrationReport",
    "NewMemory",
    "NotFoundError",
    "RecalldError",
    "RetrievalConfig",
    "SearchResult",
    "Settings",
    "Source",
    "Status",
    "StoreError",
    "TimeRange",
    "Trace",
    "__version__",
    "load_settings",
    "migrate_store",
    "open",
]


_HOMES = {
    "PRESETS": "recalld.retrieval.config",
    "RetrievalConfig": "recalld.retrieval.config",
    "Settings": "recalld.config",
    "load_settings": "recalld.config",
    "MemoryEngine": "recalld.engine",
    "Status": "recalld.engine",
    "open": "recalld.engine",
    "MigrationReport": "recalld.migration",
    "migrate_store": "recalld.migration",
    **dict.fromkeys(
        (
            "EmbedderError",
            "EmbedderMismatchError",
            "InvalidInputError",
            "NotFoundError",
            "RecalldError",
            "StoreError",
        ),
        "recalld.errors",
    ),
    **dict.fromkeys(
        (
            "AddResult",
            "ChannelHit",
            "Collection",
            "Context",
            "FileSet",
            "Hit",
            "InCollection",
            "IndexedFile",
            "Memory",
            "MemoryFilter",
            "NewMemory",
            "SearchResult",
            "Source",
            "TimeRange",
            "Trace",
        ),
        "recalld.records",
    ),
}
"""Where each public name lives: imported on first use, so ``import recalld`` (and the
``recalld`` command's start) stays cheap while the model, numpy and pydantic wait."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'recalld' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), "open_engine" if name == "open" else name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
