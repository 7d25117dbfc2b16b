"""``search_rows``: everything a search reads, in one store call (one statement on
PostgreSQL), equal on both backends to the separate reads it replaces."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

import recalld
from recalld import EmbedderMismatchError, NewMemory
from recalld.retrieval.channels import Need, request as channel_request
from recalld.stores.asks import NearestAsk, RecentAsk, WordsAsk
from recalld.stores.base import CandidateRequest, near_ids

from .conftest import Opener

WORDS = ["kayak", "river", "tent", "stove", "map", "boots", "rain", "lake"]


def filled(open_as: Opener, tenant: str = "default") -> recalld.MemoryEngine:
    """Six sessions of eight turns (one turn forgotten), and a few loose notes."""
    engine = open_as(tenant)
    items = [NewMemory(f"{WORDS[t]} talk {t} in chat {s}: the {WORDS[(s + t) % 8]} again",
                       session_id=f"chat{s}") for s in range(6) for t in range(8)]  # fmt: skip
    items += [NewMemory(f"a loose note about the {w}") for w in WORDS[:3]]
    engine.add_many(items)
    engine.forget(engine.search("tent talk 2 in chat 1", limit=1).hits[0].memory.id)
    return engine


def requests(engine: recalld.MemoryEngine, query: str) -> list[CandidateRequest]:
    vector = engine.embedder.embed_query(query)
    terms = tuple(query.split())
    return [
        CandidateRequest(
            asks={
                "semantic": NearestAsk(12, vector),
                "bm25": WordsAsk(12, terms),
                **channel_request(Need({"bm25": 12}, (), query)).asks,
                "temporal": RecentAsk(5),
            }
        ),
        CandidateRequest(asks={"bm25": WordsAsk(6, ("rain",))}),
    ]


@pytest.mark.parametrize("query", ["kayak river", "stove boots lake", "nothing matches zq"])
def test_one_call_equals_the_separate_reads(open_as: Opener, query: str) -> None:
    engine = filled(open_as)
    store = engine.store
    asked = requests(engine, query)
    rows = store.search_rows(asked, vectors=True, neighbor_radius=2, neighbor_depth=5)
    assert [dict(c) for c in rows.channels] == [dict(store.candidates(r)) for r in asked]
    ids = sorted(rows.candidate_ids)
    # What came back is what the separate reads give. A remote backend sends every
    # candidate's row and vector and the neighbours' rows (one round trip); the store in the
    # process sends none, and the pipeline reads the few it keeps.
    remote = type(store).__name__ == "PostgresStore"
    read = dict(rows.memories)
    assert read == {m.id: m for m in store.get_many(list(read))}
    want_vectors = store.vectors_for(ids)
    assert rows.vectors.keys() <= want_vectors.keys()
    for memory_id, vector in rows.vectors.items():
        assert np.allclose(want_vectors[memory_id], vector)
        if not remote:  # the very floats a read by id gives
            assert np.array_equal(want_vectors[memory_id], vector)
    assert rows.neighbors_of <= rows.candidate_ids
    assert dict(rows.neighbors) == store.session_neighbors(sorted(rows.neighbors_of), 2)
    lent = {i for pairs in rows.neighbors.values() for i, _ in pairs}
    if remote:
        assert rows.neighbors_of >= frozenset(near_ids(rows.channels[0], 5))
        assert read.keys() >= set(ids) | lent and rows.vectors.keys() == want_vectors.keys()
        if query != "nothing matches zq":
            assert rows.neighbors and lent - rows.candidate_ids  # not a vacuous comparison
    else:
        # The vectors its vector channels scored cost nothing more to send; nothing else.
        scored = {c.memory_id for found in rows.channels for c in found.get("semantic", ())}
        assert read == {} and rows.neighbors == {} and rows.vectors.keys() == scored


def test_without_vectors_or_neighbours_only_rows_come_back(open_as: Opener) -> None:
    engine = filled(open_as)
    rows = engine.store.search_rows(requests(engine, "kayak"))
    assert rows.vectors == {} and rows.neighbors == {} and rows.neighbors_of == frozenset()
    assert rows.memories.keys() <= rows.candidate_ids


def test_another_tenants_rows_never_come_back(open_as: Opener) -> None:
    filled(open_as, "alice")
    bob = open_as("bob")
    bob.add("bob's own kayak note", session_id="chat0")
    rows = bob.store.search_rows(requests(bob, "kayak river"), vectors=True, neighbor_radius=3,
                                 neighbor_depth=20)  # fmt: skip
    (only,) = rows.candidate_ids
    assert [m.content for m in bob.store.get_many([only])] == ["bob's own kayak note"]
    assert rows.memories.keys() <= {only} and rows.neighbors in ({}, {only: []})


def test_a_query_vector_of_another_dimension_is_refused(open_as: Opener) -> None:
    engine = filled(open_as)
    wrong = CandidateRequest(asks={"semantic": NearestAsk(3, np.ones(5, dtype=np.float32))})
    with pytest.raises(EmbedderMismatchError):
        engine.store.search_rows([wrong])


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement a psycopg connection sends from the test's thread, BEGIN and COMMIT
    included (not the pool's own: it sets up new connections in a background thread)."""
    import threading

    import psycopg
    from psycopg._connection_base import BaseConnection

    sent: list[str] = []
    execute, command = psycopg.Cursor.execute, BaseConnection._exec_command
    mine = threading.get_ident()

    def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == mine:
            sent.append(str(query)[:60])
        return execute(self, query, *args, **kwargs)

    def counted_command(self: Any, command_: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == mine:
            sent.append(str(command_)[:60])
        return command(self, command_, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted_execute)
    monkeypatch.setattr(BaseConnection, "_exec_command", counted_command)
    yield sent


@pytest.mark.postgres
def test_a_postgres_search_reads_in_one_statement_and_a_few_lookups(
    pg_database: str, statements: list[str]
) -> None:
    """The pipeline's candidates are one statement, plus one when the top hit's fact is
    followed forward (``kupdate_follow``); the engine's fingerprint check sends none after
    the handle's first search (the search statement brings the stored fingerprint back:
    ``test_postgres_fingerprint.py``); when asked, the access-count write follows. The
    statement brings the rows of the best-ranked candidates and the top ones' neighbours;
    the few others the pipeline keeps are at most two single-statement lookups (rows,
    neighbours), and no read is wrapped in BEGIN / COMMIT."""
    from recalld.config import Settings
    from recalld.providers.embedders import FakeEmbedder
    from recalld.retrieval.config import BALANCED

    lookups = ("SELECT m.id, m.namespace, m.session_id FROM memories m", "SELECT m.id, m.con")
    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        # Turns dated over the last three weeks: a time the query names can be answered.
        now = datetime.now(UTC)
        engine.add_many([NewMemory(f"{w} turn {i}: the {WORDS[i % 5]}", session_id=f"s{i % 3}",
                                   event_time=now - timedelta(days=i))
                         for i, w in enumerate(WORDS * 4)])  # fmt: skip
        engine.search("warm the pool up", limit=3)
        # A question that names a time is about the past: nothing is followed forward.
        cases = (("kayak in the rain", "hybrid", 2), ("the lake", "vector", 2),
                 ("what about the map last week", "auto", 1))  # fmt: skip
        for query, mode, searched in cases:
            for config in (BALANCED, BALANCED.with_changes(kupdate_follow=0)):
                statements.clear()
                result = engine.search(query, limit=5, mode=mode, config=config)
                assert result.hits
                assert not [s for s in statements if "recalld_meta" in s], statements
                reads = [s for s in statements if s.lstrip().startswith("WITH hits")]
                followed = searched if config.updates.kupdate_follow else 1
                assert len(reads) == followed, statements
                rest = [s for s in statements if s not in reads]
                assert len(rest) <= 2 and all(s.startswith(lookups) for s in rest), statements
        statements.clear()
        engine.search("kayak in the rain", limit=5, record_access=True)
        assert len(statements) > 2  # the optional access-count write


def test_asked_for_candidate_vectors_a_remote_backend_sends_every_candidates(
    open_as: Opener,
) -> None:
    """A word-channel call made beside the vector search (``read_candidates``): the vector
    channel's completion reads every word candidate's vector, so a remote backend sends them
    with the candidates, not in a second round trip; the vectors are those a read by id
    gives."""
    engine = filled(open_as)
    engine.add_many([NewMemory(f"more talk {i} about the {WORDS[i % 8]}") for i in range(30)])
    store = engine.store
    words = [CandidateRequest(asks={"bm25": WordsAsk(70, ("talk", "the"))})]
    plain = store.search_rows(words, vectors=True)
    rows = store.search_rows(words, candidate_vectors=True)
    assert [dict(c) for c in rows.channels] == [dict(c) for c in plain.channels]
    ids = sorted(rows.candidate_ids)
    assert len(ids) > 50  # more than a statement sends rows of (ROWS_DEPTH)
    want = store.vectors_for(ids)
    for memory_id, vector in rows.vectors.items():
        assert np.allclose(want[memory_id], vector)
    if type(store).__name__ == "PostgresStore":
        assert rows.vectors.keys() == want.keys()
        assert plain.vectors.keys() < want.keys()  # without it, the ranks past 50 lack them
