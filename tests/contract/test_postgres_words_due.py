"""A tenant's word postings built by the write that takes it past their size
(:mod:`recalld.stores.postgres.words_due`), as a role that owns its database and that
Row-Level Security binds (a user's server): the same word results, other handles told at
their next count, a tenant already past the size left to the command, a refused build
leaving the write whole."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest
from tests.contract.test_postgres_load import owned_database

pytestmark = pytest.mark.postgres

SIZE = 40
"""The size the tests give :data:`indexes.WORD_POSTINGS_ADVISED_ROWS`."""
WORDS = CandidateRequest(asks={"bm25": WordsAsk(20, ("garden", "tomatoes", "note"))})


@pytest.fixture
def owned(pg_admin_dsn: str) -> Iterator[str]:
    with owned_database(pg_admin_dsn, "recalld_words", temp_tables=True) as dsn:
        yield dsn


@pytest.fixture(autouse=True)
def small_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from recalld.stores.postgres import indexes

    monkeypatch.setattr(indexes, "WORD_POSTINGS_ADVISED_ROWS", SIZE)


def notes(start: int, count: int) -> list[NewMemory]:
    return [NewMemory(f"note {i} about the garden, tomatoes {i % 5} and beans {i % 3}")
            for i in range(start, start + count)]  # fmt: skip


def engine(dsn: str, tenant: str = "alice") -> recalld.MemoryEngine:
    return recalld.open(
        settings=Settings(db=dsn, cache_dir=None, tenant=tenant), embedder=FakeEmbedder()
    )


def posted(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:  # the owner, bound by the wall: set the tenants seen
        conn.execute("SELECT set_config('recalld.namespaces', 'alice,bob', false)")
        return {r[0] for r in conn.execute("SELECT namespace FROM word_namespaces")}


def test_the_write_past_the_size_builds_the_postings(owned: str) -> None:
    with engine(owned) as alice, engine(owned) as other, engine(owned, "bob") as bob:
        alice.add_many(notes(0, SIZE - 5))
        bob.add_many(notes(0, SIZE + 5))  # bob's own count: past the size, his postings
        assert posted(owned) == {"bob"}
        assert not other.store._word_postings and other.store._rows_counted()  # counted now
        alice.add_many(notes(SIZE - 5, 10))  # past the size
        assert alice.store._word_postings and posted(owned) == {"alice", "bob"}
        assert "words" not in alice.store.advised_indexes()
        answered = alice.store.candidates(WORDS)["bm25"]
        assert len(answered) == 20
        # The handle opened before learns of them at its next count (every minute).
        other.store._rows_counted(fresh=True)
        assert other.store.candidates(WORDS)["bm25"] == answered
        assert other.store._word_postings
        alice.store.build_index("words", drop=True)  # every row scored: the same answer
        with engine(owned) as fresh:
            assert not fresh.store._word_postings
            assert fresh.store.candidates(WORDS)["bm25"] == answered


def test_a_tenant_already_past_the_size_is_left_to_the_command(
    owned: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recalld.stores.postgres import indexes

    monkeypatch.setattr(indexes, "WORD_POSTINGS_ADVISED_ROWS", 10**6)
    with engine(owned) as alice:
        alice.add_many(notes(0, SIZE + 5))
    monkeypatch.setattr(indexes, "WORD_POSTINGS_ADVISED_ROWS", SIZE)
    with engine(owned) as alice:  # an earlier recalld's store, past the size
        alice.add_many(notes(SIZE + 5, 3))
        assert posted(owned) == set() and not alice.store._word_postings
        assert "words" in alice.store.advised_indexes()  # status advises the command


def test_a_refused_build_leaves_the_write_whole(
    owned: str, caplog: pytest.LogCaptureFixture
) -> None:
    with engine(owned) as alice:
        alice.add("the schema, made by the owner")
    with psycopg.connect(owned, autocommit=True) as conn:  # a role that may not build them
        conn.execute("REVOKE INSERT ON word_namespaces FROM current_user")
    with engine(owned) as alice, caplog.at_level(logging.WARNING, logger="recalld"):
        alice.add_many(notes(0, SIZE + 5))
        assert alice.store._words_refused and not alice.store._word_postings
        assert "word postings for 'alice' not built" in caplog.text
        assert alice.store.stats().memories == SIZE + 6  # every memory written
        alice.add_many(notes(SIZE + 5, 2))  # no second try, no second warning
        assert caplog.text.count("not built") == 1
        assert len(alice.store.candidates(WORDS)["bm25"]) == 20  # every row scored, as before
