"""Facade behaviour on real files: dedup reporting, the embedding cache, fingerprints and
reindex, long texts, CJK through the trigram index, migrations.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from store_check import store_snapshot

import recalld
from recalld.config import Settings
from recalld.providers.cache import CachedEmbedder, EmbeddingCache
from recalld.providers.embedders import Embedder, FakeEmbedder
from recalld.records import NewMemory
from recalld.retrieval.config import RetrievalConfig
from recalld.stores.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION, migrate

Opener = Callable[..., recalld.MemoryEngine]
BM25_ONLY = RetrievalConfig().with_changes(channels=("bm25",))


# -- no write silently dropped ----------------------------------------------------------


def test_duplicates_are_reported_not_dropped(open_store: Opener) -> None:
    engine = open_store()
    first = engine.add("The deploy key lives in the vault.")
    again = engine.add("  The deploy key lives in the vault.\n")
    assert first.created and first.duplicate_of is None
    assert (again.created, again.duplicate_of, again.id) == (False, first.id, again.id)
    assert [m.id for m in engine.list()] == [first.id]


def test_duplicates_inside_one_batch_and_across_scopes(open_store: Opener) -> None:
    engine = open_store()
    results = engine.add_many(
        [
            NewMemory("same words"),
            NewMemory("same words"),
            NewMemory("same words", project="alpha"),
            NewMemory("same words", session_id="s2"),
            NewMemory("same words", scope="team"),
            "other words",
        ]
    )
    assert [r.created for r in results] == [True, False, True, True, True, True]
    assert results[1].duplicate_of == results[0].id
    assert len(engine.list(limit=100)) == 5
    # Every input gets exactly one result, in order.
    assert len(results) == 6


def test_dedupe_off_stores_every_copy(open_store: Opener) -> None:
    engine = open_store()
    results = engine.add_many(["twice", "twice"], dedupe=False)
    assert all(r.created for r in results) and results[0].id != results[1].id
    assert len(engine.list()) == 2


def test_forgotten_memory_does_not_swallow_a_new_add(open_store: Opener) -> None:
    engine = open_store()
    old = engine.add("a fact that was forgotten")
    engine.forget(old.id)
    new = engine.add("a fact that was forgotten")
    assert new.created and new.id != old.id
    hits = [h.memory.id for h in engine.search("fact forgotten").hits]
    assert new.id in hits and old.id not in hits


def test_forget_soft_hides_and_hard_deletes(open_store: Opener) -> None:
    engine = open_store()
    soft, hard, kept = (engine.add(t).id for t in ("soft one", "hard one", "kept one"))
    assert engine.forget(soft) == 1
    assert engine.forget(soft) == 0  # already hidden: nothing changes, no error
    assert engine.forget([hard], hard=True) == 1
    hits = {h.memory.id for h in engine.search("one", mode="hybrid").hits}
    assert hits == {kept}
    assert engine.get(soft).forgotten_at is not None
    with pytest.raises(recalld.NotFoundError):
        engine.get(hard)
    stats = engine.status().store
    assert (stats.memories, stats.forgotten, stats.with_vectors) == (1, 1, 2)


def test_supersede_marks_rank_lower_and_can_be_cleared(open_store: Opener) -> None:
    engine = open_store()
    old = engine.add("The staging Redis listens on port 6379.").id
    new = engine.add("The staging Redis listens on port 6380.").id
    before = engine.get(old)
    marked = engine.supersede(old, by=new)
    assert marked.superseded_by == new and marked.content == before.content
    hits = engine.search("staging redis port", mode="hybrid", explain=True).hits
    assert [h.memory.id for h in hits][:2] == [new, old]
    assert hits[1].trace is not None and hits[1].trace.adjustments["superseded"] == 0.5
    hidden = engine.search("staging redis port", config=RetrievalConfig(superseded="hide"))
    assert [h.memory.id for h in hidden.hits] == [new]
    assert engine.supersede(old, clear=True).superseded_by is None
    until = engine.supersede(new, until=datetime(2026, 1, 1, tzinfo=UTC))
    assert until.valid_until == datetime(2026, 1, 1, tzinfo=UTC)
    # Bad requests change nothing.
    snapshot = [engine.get(i) for i in (old, new)]
    with pytest.raises(recalld.InvalidInputError):
        engine.supersede(old)
    with pytest.raises(recalld.InvalidInputError):
        engine.supersede(old, by=old)
    with pytest.raises(recalld.InvalidInputError):
        engine.supersede(old, by=new, clear=True)
    with pytest.raises(recalld.NotFoundError):
        engine.supersede(old, by="no-such-id")
    with pytest.raises(recalld.NotFoundError):
        engine.supersede("no-such-id", by=new)
    assert [engine.get(i) for i in (old, new)] == snapshot


def test_update_reembeds_changed_content_only(open_store: Opener) -> None:
    fake = FakeEmbedder()
    engine = open_store(fake, cache_dir=None)
    memory_id = engine.add("the cat sleeps on the sofa").id
    calls = fake.calls
    engine.update(memory_id, tags=["pets"])
    assert fake.calls == calls
    engine.update(memory_id, content="the dog guards the garden")
    assert fake.calls == calls + 1
    top = engine.search("dog garden", mode="vector").hits[0]
    assert top.memory.id == memory_id and top.memory.tags == ("pets",)
    assert engine.search("cat sofa", mode="hybrid", config=BM25_ONLY).hits == ()


def test_an_update_that_changes_nothing_writes_nothing(open_store: Opener) -> None:
    clock = [datetime(2026, 3, 1, tzinfo=UTC)]
    engine = open_store(FakeEmbedder(), cache_dir=None)
    engine._clock = lambda: clock[0]
    memory_id = engine.add("the cat sleeps on the sofa", tags=["pets"], project="home").id
    before = engine.get(memory_id)
    clock[0] = datetime(2026, 3, 2, tzinfo=UTC)
    assert engine.update(memory_id) == before
    assert engine.update(memory_id, tags=["pets"], project="home") == before
    assert engine.get(memory_id).updated_at == before.updated_at
    changed = engine.update(memory_id, tags=["pets", "sofa"])
    assert changed.tags == ("pets", "sofa") and changed.updated_at == clock[0]


# -- the embedding cache -----------------------------------------------------------------


def test_cache_reuses_embeddings_across_stores(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    texts = ["alpha memory about rivers", "beta memory about mountains"]
    first = FakeEmbedder()
    with recalld.open(
        settings=Settings(db=tmp_path / "a.db", cache_dir=cache), embedder=first
    ) as a:
        a.add_many(texts)
    assert first.calls == 1
    second = FakeEmbedder()
    with recalld.open(
        settings=Settings(db=tmp_path / "b.db", cache_dir=cache), embedder=second
    ) as b:
        results = b.add_many([*texts, "gamma memory about lakes"])
        assert all(r.created for r in results)
        assert second.calls == 1  # only "gamma" went to the embedder
        b.add("beta memory about mountains", project="elsewhere")
        assert second.calls == 1
        # The cached vectors are the ones the embedder would have made.
        hit = b.search("mountains", mode="vector").hits[0]
        assert hit.memory.content == texts[1]


def test_cache_is_keyed_by_fingerprint(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with recalld.open(
        settings=Settings(db=tmp_path / "a.db", cache_dir=cache), embedder=FakeEmbedder(64)
    ) as a:
        a.add("shared content")
    other = FakeEmbedder(32)
    with recalld.open(
        settings=Settings(db=tmp_path / "b.db", cache_dir=cache), embedder=other
    ) as b:
        b.add("shared content")
    assert other.calls == 1


def test_unusable_cache_folder_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    settings = Settings(db=tmp_path / "m.db", cache_dir=blocker / "cache")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        with pytest.raises(recalld.StoreError) as caught:
            engine.add("needs the cache")
        assert "cache" in str(caught.value)
        assert engine.list() == []


# -- fingerprints and reindex ----------------------------------------------------------


def test_reindex_with_another_embedder_keeps_everything(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "m.db", cache_dir=tmp_path / "cache")
    places = [("key", "drawer"), ("bike", "garage"), ("passport", "safe"), ("umbrella", "car")]
    texts = [f"note {i}: the {what} is in the {where}" for i, (what, where) in enumerate(places)]
    with recalld.open(settings=settings, embedder=FakeEmbedder(64, "model-a")) as a:
        ids = [r.id for r in a.add_many(texts)]
        a.forget(ids[3])
    model_b = FakeEmbedder(48, "model-b")
    with recalld.open(settings=settings, embedder=model_b) as b:
        with pytest.raises(recalld.EmbedderMismatchError):
            b.search("where is the passport")
        assert b.status().fingerprint_matches is False
        assert b.reindex() == 4  # forgotten memories keep a vector too
        stats = b.status()
        assert stats.fingerprint_matches is True
        assert stats.store.with_vectors == 4 and stats.store.memories == 3
        assert '"model-b"' in (stats.embedder_fingerprint or "")
        stored = b.list(include_forgotten=True)
        assert {m.embedding_fingerprint for m in stored} == {stats.embedder_fingerprint}
        assert b.search("where is the passport", mode="vector").hits[0].memory.id == ids[2]
        extra = "note 5: the map is in the glovebox"
        assert b.add(extra).created
        live = [m.content for m in b.list(limit=10, newest_first=False)]
        assert live == [*texts[:3], extra]
    # Reopening with the old embedder is now the mismatch.
    with (
        recalld.open(settings=settings, embedder=FakeEmbedder(64, "model-a")) as a,
        pytest.raises(recalld.EmbedderMismatchError),
    ):
        a.add("another")


def test_reindex_of_an_empty_store_sets_the_fingerprint(open_store: Opener) -> None:
    engine = open_store(FakeEmbedder(16))
    assert engine.reindex() == 0
    assert '"dimension": 16' in (engine.status().store.fingerprint or "")


# -- long text and CJK -------------------------------------------------------------------


def test_long_text_is_windowed_not_truncated(open_store: Opener, local_embedder: Embedder) -> None:
    engine = open_store(local_embedder)
    filler = " ".join(f"sentence {i} talks about the weather in spring." for i in range(120))
    tail = " The secret ingredient of the soup is smoked paprika."
    long_result = engine.add(filler + tail)
    short_result = engine.add("A short memory about the weather.")
    assert long_result.embedding_windows > 1
    assert short_result.embedding_windows == 1
    stored = engine.get(long_result.id).content
    assert stored == (filler + tail).strip()
    # Text far past the first 256 tokens still shapes the vector: truncation would make
    # these two identical.
    with_tail, without_tail = local_embedder.embed_documents([filler + tail, filler]).vectors
    assert float(with_tail @ without_tail) < 0.9999


@pytest.mark.parametrize(
    ("query", "wanted"),
    [("抹茶", 0), ("抹茶アイス", 0), ("北京烤鸭", 1), ("烤鸭", 1), ("김치찌개", 2)],
)
def test_cjk_text_is_found_through_the_trigram_index(
    open_store: Opener, query: str, wanted: int
) -> None:
    engine = open_store()
    texts = [
        "昨日は抹茶アイスを食べました",
        "我最喜欢吃北京烤鸭",
        "오늘 저녁은 김치찌개",
        "plain English",
    ]
    ids = [r.id for r in engine.add_many(texts)]
    result = engine.search(query, mode="hybrid", config=BM25_ONLY, explain=True)
    assert result.hits, query
    assert result.hits[0].memory.id == ids[wanted]
    assert {h.memory.id for h in result.hits} == {ids[wanted]}
    assert result.hits[0].trace is not None
    assert [c.channel for c in result.hits[0].trace.channels] == ["bm25"]


def test_porter_stemming_in_the_bm25_channel(open_store: Opener) -> None:
    engine = open_store()
    target = engine.add("We were running the migrations all night").id
    engine.add("Completely unrelated memory about tea")
    hits = engine.search("migration runs", mode="hybrid", config=BM25_ONLY).hits
    assert [h.memory.id for h in hits] == [target]


# -- migrations -------------------------------------------------------------------------


def test_migrations_from_empty_and_rerun(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    try:
        assert migrate(db) == [name for _, name, _ in MIGRATIONS]
        assert migrate(db) == []  # idempotent: nothing left to apply
        applied = db.execute("SELECT id, name FROM migrations ORDER BY id").fetchall()
        assert applied == [(n, name) for n, name, _ in MIGRATIONS]
        assert applied[-1][0] == SCHEMA_VERSION
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        for table in ("memories", "memories_fts", "memories_trigram", "vectors", "memory_tags",
                      "memory_entities", "meta"):  # fmt: skip
            assert table in tables
        # Each step is idempotent on its own, so a run that died half-way can be repeated.
        for _, _, step in MIGRATIONS:
            step(db)
    finally:
        db.close()


def test_store_reopens_with_its_schema_version(open_store: Opener) -> None:
    engine = open_store()
    engine.add("persisted")
    engine.close()
    again = open_store()
    assert again.status().store.schema_version == SCHEMA_VERSION
    assert [m.content for m in again.list()] == ["persisted"]


def test_a_store_without_vectors_adopts_a_new_embedder(open_store: Opener) -> None:
    first = open_store(FakeEmbedder(64, "model-a"))
    assert first.search("nothing stored yet").hits == ()  # records model-a's fingerprint
    gone = first.add("soon deleted").id
    first.forget(gone, hard=True)
    first.close()
    second = open_store(FakeEmbedder(32, "model-b"))
    assert second.add("first real memory").created
    assert '"model-b"' in (second.status().store.fingerprint or "")


class _FailingEmbedder(FakeEmbedder):
    """Fails on its n-th batch, like a model server going away mid-way."""

    def __init__(self, fail_on: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.fail_on = fail_on

    def embed_batch(self, texts, *, is_query):  # type: ignore[no-untyped-def]
        if self.calls + 1 >= self.fail_on:
            raise recalld.EmbedderError("the model server went away")
        return super().embed_batch(texts, is_query=is_query)


class _WrongShapeEmbedder(FakeEmbedder):
    def embed_batch(self, texts, *, is_query):  # type: ignore[no-untyped-def]
        batch = super().embed_batch(texts, is_query=is_query)
        return type(batch)(batch.vectors[:, :-1], batch.windows)


def test_interrupted_reindex_changes_nothing(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "m.db", cache_dir=None, embed_batch_size=2)
    with recalld.open(settings=settings, embedder=FakeEmbedder(64, "model-a")) as a:
        a.add_many([f"memory {i} about topic {i}" for i in range(6)])
    before = store_snapshot(tmp_path / "m.db")
    failing = _FailingEmbedder(fail_on=2, dimension=32, model_id="model-b")
    failing.batch_size = 2
    with (
        recalld.open(settings=settings, embedder=failing) as b,
        pytest.raises(recalld.EmbedderError),
    ):
        b.reindex()
    assert store_snapshot(tmp_path / "m.db") == before
    with recalld.open(settings=settings, embedder=FakeEmbedder(64, "model-a")) as a:
        assert (
            a.search("memory 3 topic 3", mode="vector")
            .hits[0]
            .memory.content.startswith("memory 3 ")
        )


def test_embedder_returning_the_wrong_shape_is_an_embedder_error(open_store: Opener) -> None:
    engine = open_store(_WrongShapeEmbedder(dimension=16, model_id="broken"))
    with pytest.raises(recalld.EmbedderError) as caught:
        engine.add("any text")
    assert "shape" in str(caught.value)
    assert store_snapshot(Path(engine.settings.db))["memories"] == []


def test_cached_embedder_counts_hits_and_misses(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    inner = FakeEmbedder()
    try:
        cached = CachedEmbedder(inner, cache)
        first = cached.embed_documents(["one", "two", "one"])
        # A repeat inside one call is embedded once and counted as a hit.
        assert (cached.hits, cached.misses, inner.calls) == (1, 2, 1)
        second = cached.embed_documents(["two", "one", "three"])
        assert (cached.hits, cached.misses, inner.calls) == (3, 3, 2)
        assert second.vectors[0].tolist() == first.vectors[1].tolist()
        assert second.vectors[1].tolist() == first.vectors[0].tolist()
    finally:
        cache.close()
