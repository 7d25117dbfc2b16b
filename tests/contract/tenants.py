"""Two tenants in one PostgreSQL database for the tests of a small tenant's searches: the
tenant ``small`` (40 memories on five topics) beside the tenant ``large``."""

from __future__ import annotations

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory


def small_and_large(dsn: str, model: FakeEmbedder, large: list[str]) -> None:
    """``small``'s 40 memories (``memory {i} on topic {i % 5}``) and ``large``'s texts."""
    for tenant, texts in (
        ("small", [f"memory {i} on topic {i % 5}" for i in range(40)]),
        ("large", large),
    ):
        settings = Settings(db=dsn, cache_dir=None, tenant=tenant)
        with recalld.open(settings=settings, embedder=model) as engine:
            engine.add_many([NewMemory(text) for text in texts])
