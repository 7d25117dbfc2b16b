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
from recalld.providers.embedders import EmbeddingBatch, FakeEmbedder

BATCH_SECONDS = 0.05


class SlowEmbedder(FakeEmbedder):
    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        time.sleep(BATCH_SECONDS)
        done = super().embed_batch(texts, is_query=is_query)
        print(f"embedded {len(texts)}", flush=True)
        return done


def main(db: str, cache: str, workspace: str) -> None:
    settings = Settings(db=Path(db), cache_dir=Path(cache))
    with recalld.open(settings=settings, embedder=SlowEmbedder()) as engine:
        engine.index([workspace])
    print("finished", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
