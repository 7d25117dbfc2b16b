"""Length-sorted, token-bounded batching: order kept, vectors unchanged, bounds honoured."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

import recalld
from recalld.config import Settings
from recalld.operations import writing as writing_module
from recalld.providers.cache import CachedEmbedder, EmbeddingCache
from recalld.providers.embedders import (
    Embedder,
    EmbeddingBatch,
    FakeEmbedder,
    plan_batches,
    resolve_embedder,
)
from recalld.providers.onnx import OnnxEmbedder


class RecordingEmbedder(FakeEmbedder):
    """The fake's vectors; remembers every batch it was handed."""

    def __init__(self, batch_size: int = 4, batch_tokens: int = 0) -> None:
        super().__init__(32)
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.batches: list[list[str]] = []

    def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
        self.batches.append(list(texts))
        return super().embed_batch(texts, is_query=is_query)


def _texts(count: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"t{i} " + " ".join(f"w{int(x)}" for x in rng.integers(0, 50, int(n)))
            for i, n in enumerate(rng.integers(0, 40, count))]  # fmt: skip


@given(
    st.lists(st.integers(1, 600), max_size=60).map(sorted),
    st.integers(1, 16),
    st.sampled_from([0, 64, 500, 4096]),
)
def test_plan_batches_covers_in_order_within_bounds(
    costs: list[int], max_texts: int, max_tokens: int
) -> None:
    spans = plan_batches(costs, max_texts, max_tokens)
    assert [i for span in spans for i in span] == list(range(len(costs)))
    for span in spans:
        assert 1 <= len(span) <= max_texts
        if max_tokens and len(span) > 1:
            assert len(span) * costs[span[-1]] <= max_tokens
    # greedy: no batch could have taken the next text
    for span, after in zip(spans, spans[1:], strict=False):
        grown = len(span) + 1
        assert grown > max_texts or (max_tokens and grown * costs[after[0]] > max_tokens)


def test_a_text_over_the_token_bound_gets_a_batch_of_its_own() -> None:
    assert plan_batches([5, 5, 900, 901], 8, 100) == [range(0, 2), range(2, 3), range(3, 4)]


def test_batches_are_cut_shortest_first_and_rows_stay_in_input_order() -> None:
    texts = _texts(23)
    recording = RecordingEmbedder(batch_size=4, batch_tokens=120)
    result = recording.embed_documents(texts)
    alone = FakeEmbedder(32)
    for row, text in enumerate(texts):
        np.testing.assert_array_equal(result.vectors[row], alone.embed_documents([text]).vectors[0])
    assert result.windows == (1,) * len(texts)
    fed = [t for batch in recording.batches for t in batch]
    assert sorted(fed) == sorted(texts)
    costs = recording.token_counts(fed)
    assert costs == sorted(costs)
    for batch in recording.batches:
        counts = recording.token_counts(batch)
        assert len(batch) <= 4 and (len(batch) == 1 or len(batch) * max(counts) <= 120)


def test_progress_counts_every_text_once() -> None:
    seen: list[int] = []
    RecordingEmbedder(batch_size=5).embed_documents(_texts(17), seen.append)
    assert sum(seen) == 17 and len(seen) == 4


def test_a_batch_of_the_wrong_length_is_an_embedder_error() -> None:
    class Short(RecordingEmbedder):
        def embed_batch(self, texts: Sequence[str], *, is_query: bool) -> EmbeddingBatch:
            batch = super().embed_batch(texts, is_query=is_query)
            return EmbeddingBatch(batch.vectors[:-1], batch.windows[:-1])

    with pytest.raises(recalld.EmbedderError, match="expected"):
        Short().embed_documents(_texts(6))


@pytest.fixture(scope="module")
def onnx(local_embedder: Embedder) -> OnnxEmbedder:
    assert isinstance(local_embedder, OnnxEmbedder)
    return local_embedder


def test_sorted_batches_give_the_vectors_of_input_order_batches(onnx: OnnxEmbedder) -> None:
    """The vectors recalld stored before sorting (batches of 32 cut in input order) and the
    ones it stores now agree within float tolerance, long multi-window texts included."""
    rng = np.random.default_rng(3)
    words = [
        "the",
        "deploy",
        "broke",
        "on",
        "friday",
        "my",
        "sister",
        "visits",
        "lisbon",
        "in",
        "april",
        "again",
    ]
    texts = [" ".join(rng.choice(words, int(n))) for n in rng.integers(1, 60, 70)]
    texts += [" ".join(rng.choice(words, 700)), "short one", " ".join(rng.choice(words, 300))]
    before = [onnx.embed_batch(texts[s : s + 32], is_query=False) for s in range(0, 73, 32)]
    old = np.vstack([b.vectors for b in before])
    new = onnx.embed_documents(texts)
    np.testing.assert_allclose(new.vectors, old, atol=2e-5)
    assert new.windows == tuple(w for b in before for w in b.windows)
    assert new.windows[70] > 1


def test_token_counts_are_the_windows_fed_to_the_model(onnx: OnnxEmbedder) -> None:
    short, long = "hello there", "word " * 600
    counts = onnx.token_counts([short, long])
    assert counts[0] == 4  # [CLS] hello there [SEP]
    assert counts[1] == sum(len(w) for w in onnx._windows(long)) and counts[1] > 600


def test_settings_reach_the_local_embedder(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "m.db", cache_dir=None, embed_batch_size=8,
                        embed_batch_tokens=1000, embed_threads=1)  # fmt: skip
    built = resolve_embedder("local", settings)
    assert isinstance(built, OnnxEmbedder)
    assert (built.batch_size, built.batch_tokens) == (8, 1000)
    assert built._session.get_session_options().intra_op_num_threads == 1


def test_add_many_embeds_a_span_at_once_and_dedupes_across_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writing_module, "EMBED_SPAN", 8)
    monkeypatch.setattr(writing_module, "WRITE_BATCH", 3)
    recording = RecordingEmbedder(batch_size=100)
    texts = _texts(20)
    items = [*texts, texts[2], texts[15]]  # repeats, in a later span than the first copy
    seen: list[int] = []
    settings = Settings(db=tmp_path / "m.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=recording) as memory:
        results = memory.add_many(items, progress=seen.append)
        stored = {m.id: m.content for m in memory.list(limit=100)}
    assert [len(b) for b in recording.batches] == [8, 8, 4]  # one model call per span
    assert sum(seen) == len(items)
    assert [r.created for r in results] == [True] * 20 + [False, False]
    assert results[20].duplicate_of == results[2].id
    assert [stored[r.id] for r in results[:20]] == [t.strip() for t in texts]


def test_cache_misses_go_to_the_model_sorted_and_come_back_in_order(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    try:
        recording = RecordingEmbedder(batch_size=3)
        cached = CachedEmbedder(recording, cache)
        texts = _texts(9)
        cached.embed_documents(texts[::2])  # rows 0, 2, 4, 6, 8 are cached now
        recording.batches.clear()
        result = cached.embed_documents(texts)
        assert sorted(t for b in recording.batches for t in b) == sorted(texts[1::2])
        fed = [t for b in recording.batches for t in b]
        assert recording.token_counts(fed) == sorted(recording.token_counts(fed))
        expected = FakeEmbedder(32).embed_documents(texts).vectors
        np.testing.assert_array_equal(result.vectors, expected)
        assert cached.token_counts(texts) == recording.token_counts(texts)
        assert (cached.batch_size, cached.batch_tokens) == (3, 0)
    finally:
        cache.close()
