"""Run by test_interrupted_index: index a workspace with an embedder slow enough to be
interrupted half-way, printing each batch as it is embedded (``python index_slowly.py DB
CACHE WORKSPACE``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import recalld
from recalld.config import Settings
from recalld.providers.cache import CACHE_COMMIT_TEXTS
from recalld.providers.embedders import EmbeddingBatch, FakeEmbedder

BATCH_SECONDS = 0.05
INTERRUPTED_AFTER = 2 * CACHE_COMMIT_TEXTS
"""The texts the test waits to see embedded before it sends SIGINT."""
LATER_BATCH_SECONDS = 1.0
"""Each batch's time after that: the workspace's ~1,000 chunks take 32 batches, so at the
first pace the index could end before a test process slowed by a busy machine had read
the lines and interrupted it (it did, finishing normally)."""


class SlowEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.embedded = 0

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        late = self.embedded >= INTERRUPTED_AFTER
        time.sleep(LATER_BATCH_SECONDS if late else BATCH_SECONDS)
        done = super().embed_batch(texts, is_query=is_query)
        self.embedded += len(texts)
        print(f"embedded {len(texts)}", flush=True)
        return done


def main(db: str, cache: str, workspace: str) -> None:
    settings = Settings(db=Path(db), cache_dir=Path(cache))
    with recalld.open(settings=settings, embedder=SlowEmbedder()) as engine:
        engine.index([workspace])
    print("finished", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
