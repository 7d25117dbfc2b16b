"""Adds of the same memory at the same moment, through separate handles (as separate
processes or servers on one store would): one is stored, the others name it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from recalld.errors import ConflictError
from recalld.providers.embedders import EmbeddingBatch, FakeEmbedder
from recalld.records import AddResult, NewMemory

from .conftest import Opener

HANDLES, ROUNDS = 4, 5


class SlowEmbedder(FakeEmbedder):
    """Embeds after a pause: every add's check for a duplicate happens before any insert."""

    def __init__(self, pause: threading.Barrier) -> None:
        super().__init__()
        self.pause = pause

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        if not is_query:
            self.pause.wait(timeout=30)
        return super().embed_batch(texts, is_query=is_query)


def _at_once(count: int, work: object) -> list[object]:
    results: list[object] = [None] * count

    def run(n: int) -> None:
        try:
            results[n] = work(n)  # type: ignore[operator]
        except Exception as exc:  # reported to the main thread
            results[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_the_same_content_added_at_once_is_stored_once(open_as: Opener) -> None:
    pause = threading.Barrier(HANDLES)
    engines = [open_as(embedder=SlowEmbedder(pause)) for _ in range(HANDLES)]
    for round_ in range(ROUNDS):
        text = f"The staging database moved to port {6000 + round_}."
        results = _at_once(HANDLES, lambda n, text=text: engines[n].add_many([text])[0])
        added = [r for r in results if isinstance(r, AddResult)]
        assert len(added) == HANDLES, results
        assert sum(r.created for r in added) == 1, results
        (kept,) = {r.id for r in added if r.created}
        assert all(r.duplicate_of == kept for r in added if not r.created), results
        assert engines[0].get(kept).content == text
    assert engines[0].status().store.memories == ROUNDS


def test_the_same_id_added_at_once_is_stored_once_or_refused(open_as: Opener) -> None:
    pause = threading.Barrier(2)
    first, second = (open_as(embedder=SlowEmbedder(pause)) for _ in range(2))
    handles = (first, second)
    same = _at_once(2, lambda n: handles[n].add_many([NewMemory("Ana lands on the 14th.",
                                                                id="ana")])[0])  # fmt: skip
    assert sorted(r.created for r in same) == [False, True], same  # type: ignore[union-attr]
    texts = ("Ben lands on the 14th.", "Ben lands on the 15th.")
    clash = _at_once(2, lambda n: handles[n].add_many([NewMemory(texts[n], id="ben")])[0])
    refused = [r for r in clash if isinstance(r, ConflictError)]
    assert len(refused) == 1 and "already exists with other content" in str(refused[0]), clash
    stored = next(r for r in clash if isinstance(r, AddResult))
    assert stored.created and first.get("ben").content == texts[clash.index(stored)]
