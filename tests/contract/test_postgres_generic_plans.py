"""A small tenant's search statements run on generic plans (planned once per prepared
statement), with the same answers; so do a larger tenant's statements whose vector channels
read its live rows alone, where both plans read them alike; the others keep the server's
default."""

from __future__ import annotations

from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.postgres import plans

from .tenants import small_and_large

pytestmark = pytest.mark.postgres

QUESTIONS = ["memory on topic 3", "what about topic 1", "other things", "topic 4 memory"]
ROUNDS = 7
"""Each question this often: past psycopg's threshold for preparing a statement (5)."""


def _fill(dsn: str, model: FakeEmbedder) -> None:
    small_and_large(dsn, model, [f"other {i} about topic {i % 7}" for i in range(300)])


def _searched(dsn: str, tenant: str, model: FakeEmbedder) -> tuple[list[Any], set[str], Any]:
    """Every question's top 10 (ids and scores) over the rounds, the ``plan_cache_mode`` of
    the handle's connections, and the prepared search statements' (generic, custom) plans."""
    with recalld.open(settings=Settings(db=dsn, cache_dir=None, tenant=tenant),
                      embedder=model) as engine:  # fmt: skip
        tops = [
            [(h.memory.id, h.score) for h in engine.search(q, limit=10).hits]
            for _ in range(ROUNDS)
            for q in QUESTIONS
        ]
        store: Any = engine.store
        modes, counted = set(), [0, 0]
        size = store._pool.get_stats()["pool_size"]
        held = [store._pool.getconn() for _ in range(size)]
        try:
            for conn in held:
                found = conn.execute("SHOW plan_cache_mode").fetchone()
                modes.add(found[0])
                row = conn.execute(
                    "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)"
                    " FROM pg_prepared_statements WHERE statement LIKE '%%WITH hits%%'"
                ).fetchone()
                counted = [counted[0] + int(row[0]), counted[1] + int(row[1])]
        finally:
            for conn in held:
                store._pool.putconn(conn)
    return tops, modes, counted


def test_a_small_tenants_searches_run_on_generic_plans_with_the_same_answers(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = FakeEmbedder()
    _fill(pg_database, model)
    monkeypatch.setattr(plans, "same_vector_reads", lambda *args: False)  # the plain rule off
    monkeypatch.setattr(plans, "GENERIC_PLANS_MAX_ROWS", 0)  # the server's default: reference
    expected, modes, (generic, custom) = _searched(pg_database, "small", model)
    assert modes == {"auto"} and custom > 0
    monkeypatch.setattr(plans, "GENERIC_PLANS_MAX_ROWS", 100)  # 40 small, 300 large
    tops, modes, (generic, custom) = _searched(pg_database, "small", model)
    assert modes == {"force_generic_plan"}
    assert generic > 0 and custom == 0  # planned once per prepared statement
    assert tops == expected  # ids and scores
    _, modes, (generic, custom) = _searched(pg_database, "large", model)
    assert modes == {"auto"} and custom > 0


def test_a_larger_tenants_plain_searches_run_on_generic_plans_with_the_same_answers(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the small tenant's size: statements whose vector channels read the live rows
    alone run on generic plans where both plans read them alike, prepared at their first
    use, with the answers of the server's default; a search filtered to a type goes back to
    the default (the mode sent in its round trip)."""
    model = FakeEmbedder()
    _fill(pg_database, model)
    monkeypatch.setattr(plans, "GENERIC_PLANS_MAX_ROWS", 0)
    with monkeypatch.context() as m:
        m.setattr(plans, "same_vector_reads", lambda *args: False)
        expected, modes, (generic, custom) = _searched(pg_database, "large", model)
    assert modes == {"auto"} and custom > 0
    tops, modes, (generic, custom) = _searched(pg_database, "large", model)
    # Every prepared search statement planned generically (a connection that ran none,
    # only later stages' reads, keeps the default).
    assert "force_generic_plan" in modes and generic > 0 and custom == 0
    assert tops == expected  # ids and scores
    from recalld.records import MemoryFilter
    from recalld.stores.asks import NearestAsk
    from recalld.stores.base import CandidateRequest, Tenancy
    from recalld.stores.postgres import PostgresStore

    store = PostgresStore(pg_database, Tenancy("large"))
    store._pool.wait()  # its first connection made: the searches below run on it
    asks = {"semantic": NearestAsk(5, model.embed_query("topic 3"))}
    typed = CandidateRequest(MemoryFilter(types=("fact",)), asks)

    def mode() -> str:
        assert store._pool.get_stats()["pool_size"] == 1
        with store._read() as conn:
            found = conn.execute("SHOW plan_cache_mode").fetchone()
        assert found is not None
        return str(found[0])

    try:
        assert store.search_rows([CandidateRequest(asks=asks)]).channels[0]["semantic"]
        assert mode() == "force_generic_plan"
        store.search_rows([typed])
        assert mode() == "auto"
    finally:
        store.close()


def test_both_plans_read_the_vector_channel_alike_or_not(pg_database: str) -> None:
    """The table's HNSW index is read by both plans; a tenant's own (partial) index is read
    by its own plan, and by the generic one only where the statement names the tenant in
    its text."""
    import psycopg

    from recalld.stores.base import Tenancy
    from recalld.stores.postgres import PostgresStore

    _fill(pg_database, FakeEmbedder())
    with psycopg.connect(pg_database, autocommit=True) as conn:
        assert plans.same_vector_reads(conn, "large", literal=False)
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_sort = off")  # the index wins wherever it may be used
        assert plans.same_vector_reads(conn, "large", literal=False)
    store = PostgresStore(pg_database, Tenancy("large"))
    try:
        store.build_index("vectors")
    finally:
        store.close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_sort = off")
        assert plans.same_vector_reads(conn, "large", literal=True)
        assert not plans.same_vector_reads(conn, "large", literal=False)


def test_no_generic_plans_where_the_generic_plan_would_walk_the_vector_index(
    pg_database: str,
) -> None:
    """The check asks the planner: with sorting priced out, the generic plan of the vector
    channel walks the HNSW index, and generic plans are refused."""
    import psycopg

    _fill(pg_database, FakeEmbedder())
    with psycopg.connect(pg_database, autocommit=True) as conn:
        assert plans.generic_scans_exactly(conn)
        conn.execute("SET enable_sort = off")
        conn.execute("SET enable_seqscan = off")
        assert not plans.generic_scans_exactly(conn)


def test_the_choice_is_forgotten_with_each_connection(pg_database: str) -> None:
    """What each connection was told is kept as long as the connection: a long-running
    server whose pool replaces its connections holds no entry for the ones gone (and a new
    connection given a gone one's backend pid is told again)."""
    import gc

    import psycopg

    choice = plans.PlanChoice()
    for _ in range(3):
        conns = [psycopg.connect(pg_database, autocommit=True) for _ in range(4)]
        for conn in conns:
            choice.configure(conn)
            choice.apply(conn, ["small"], 10, own_index=False)
        assert choice.told() == 4
        for conn in conns:
            conn.close()
        del conns, conn
        gc.collect()
        assert choice.told() == 0


def test_word_statements_of_a_tenant_with_postings_run_prepared_on_generic_plans(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GENERIC_WORDS: a handle with word postings, not small (its statements otherwise on the
    server's default), sends a statement that asks only word channels prepared at its first
    use and planned generically, with the rows its own plans give; a statement that reads a
    vector channel afterwards, on the same connection, is back on the default (the change
    sent in its round trip), through ``search_rows`` and ``candidates`` alike."""
    from datetime import UTC, datetime

    from recalld.lexical import phrases
    from recalld.retrieval.channels import Need, request as channel_request
    from recalld.retrieval.query import understand
    from recalld.stores.asks import NearestAsk
    from recalld.stores.base import CandidateRequest, Tenancy
    from recalld.stores.postgres import PostgresStore, results

    model = FakeEmbedder()
    _fill(pg_database, model)
    monkeypatch.setattr(plans, "GENERIC_PLANS_MAX_ROWS", 0)
    monkeypatch.setattr(plans, "same_vector_reads", lambda *args: False)  # vectors: default
    builder = PostgresStore(pg_database, Tenancy("large"))
    builder.build_index("words")
    store = PostgresStore(pg_database, Tenancy("large"))
    store._pool.wait()  # its first connection made: searches do not race it to a second
    now = datetime.now(UTC)
    words = [channel_request(Need({"bm25": 20}, understand(q, "hybrid", now).terms, q))
             for q in QUESTIONS]  # fmt: skip
    vector = CandidateRequest(asks={"semantic": NearestAsk(5, model.embed_query("topic 3"))})

    def state() -> tuple[str, list[tuple[int, int]]]:
        assert store._pool.get_stats()["pool_size"] == 1  # the one connection searched on
        with store._read() as conn:
            mode = conn.execute("SHOW plan_cache_mode").fetchone()
            plans_made = conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%lex_%%' ORDER BY prepare_time"
            ).fetchall()
        assert mode is not None
        return str(mode[0]), [(int(g), int(c)) for g, c in plans_made]

    try:
        assert store._word_postings and state() == ("auto", [])
        with monkeypatch.context() as m:  # the reference: the handle's own plans
            m.setattr(results, "words_only", lambda requests: False, raising=False)
            expected = [store.search_rows([w]).channels for w in words]
            assert state() == ("auto", [])  # each text used once: none prepared
        assert [store.search_rows([w]).channels for w in words] == expected
        mode, made = state()
        assert mode == "force_generic_plan" and made and all(c == 0 for _, c in made)
        posted = [w for w in words if "bm25" in w.asks and phrases(w.asks["bm25"].terms)]
        assert sum(g for g, _ in made) == len(posted)  # each prepared at its first use
        nearest = store.search_rows([vector]).channels
        assert state()[0] == "auto"
        store.search_rows([words[0]])
        assert store.candidates(vector)["semantic"] == nearest[0]["semantic"]
        assert state()[0] == "auto"
        # Postings dropped by another handle: the word statement fails in the pipeline that
        # changes the mode; that connection is closed and the search answers without them.
        builder.build_index("words", drop=True)
        assert store.search_rows([words[0]]).channels == expected[0]
        assert not store._word_postings
    finally:
        store.close()
        builder.close()


def test_a_statement_is_plain_when_its_vector_channels_read_the_live_rows_alone() -> None:
    """What the plain rule takes: a statement reading a vector channel whose requests ask
    the live rows alone (forgotten ones in or out); not a time window, a narrower filter, or
    a statement of word channels alone (:data:`plans.GENERIC_WORDS` decides those)."""
    from datetime import UTC, datetime

    from recalld.records import MemoryFilter, TimeRange
    from recalld.stores.asks import NearestAsk, WordsAsk
    from recalld.stores.base import CandidateRequest
    from recalld.stores.postgres.results import plain_vectors

    vector = FakeEmbedder().embed_query("topic 3")
    near, words = NearestAsk(5, vector), WordsAsk(5, ("topic",))
    window = TimeRange(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC))
    plain = CandidateRequest(asks={"semantic": near, "bm25": words})
    assert plain_vectors([plain])
    assert plain_vectors([CandidateRequest(MemoryFilter(include_forgotten=True), plain.asks)])
    assert plain_vectors([plain, CandidateRequest(MemoryFilter(tags=("x",)), {"bm25": words})])
    assert not plain_vectors([CandidateRequest(asks={"bm25": words})])
    assert not plain_vectors([CandidateRequest(MemoryFilter(tags=("x",)), plain.asks)])
    assert not plain_vectors([plain, CandidateRequest(asks={"w": NearestAsk(5, vector, window)})])
    assert not plain_vectors([CandidateRequest(MemoryFilter(time_range=window), plain.asks)])
