"""recalld: a memory retrieval engine for AI agents.

>>> import recalld
>>> with recalld.open("memory.db") as memory:          # doctest: +SKIP
...     memory.add("I moved to Berlin in March 2024.")
...     memory.search("where do I live?")
"""

from recalld.config import Settings, load_settings
from recalld.engine import MemoryEngine, Status
from recalld.engine import open_engine as open  # noqa: A004 - the facade's entry point
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
    Context,
    Hit,
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
    "Context",
    "EmbedderError",
    "EmbedderMismatchError",
    "Hit",
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
