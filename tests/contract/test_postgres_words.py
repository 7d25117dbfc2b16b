"""The PostgreSQL word channel over a tenant's word postings (``recalld postgres
word-index``): each row's score from the postings alone, the table read for the best rows
only, and the same list as scoring every matching row on the table, ties across the cut
included."""

from __future__ import annotations

from itertools import permutations
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest, Tenancy

pytestmark = pytest.mark.postgres

WORDS = ("zephyr", "quartz", "lantern", "meadow")


def test_word_postings_score_rows_from_the_postings_and_break_ties_by_id(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 memories hold the same four words in another order (the same BM25 score each),
    beside others holding fewer of them. Asked for fewer than the tied rows, the channel
    over postings returns the rows and scores that scoring every matching row gives (ties
    by id), however many rows it reads from the table first; the rows' tokens are never
    counted on the table for one-word phrases."""
    from recalld.stores.postgres import PostgresStore, word_sql

    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        for words in permutations(WORDS):
            engine.add(" ".join(words))
        for i in range(30):
            engine.add(f"{WORDS[i % 4]} note number {i} about something else")
        engine.build_index("words")
    store = PostgresStore(pg_database)
    assert store._word_postings
    asks = [CandidateRequest(asks={"bm25": WordsAsk(limit, (w,) if w else WORDS)})
            for limit in (1, 5, 23, 24, 40) for w in ("", "zephyr")]  # fmt: skip
    sql, _ = store._candidates_sql(asks[0])
    assert "word_postings" in sql and "array_positions" not in sql

    def lists() -> list[list[tuple[str, float]]]:
        return [[(c.memory_id, c.score) for c in store.candidates(a)["bm25"]] for a in asks]

    with_postings = lists()
    store._word_postings = False
    exact = lists()
    store._word_postings = True
    assert with_postings == exact
    tied = exact[2]  # the five best of 24 equal scores
    assert len(tied) == 5 and len({s for _, s in tied}) == 1
    for factor, extra in ((0, 0), (1, 0), (1, 3), (4, 100)):
        monkeypatch.setattr(word_sql, "WORD_READ_FACTOR", factor)
        monkeypatch.setattr(word_sql, "WORD_READ_EXTRA", extra)
        assert lists() == exact, (factor, extra)
    store.close()


def test_a_small_tenant_scores_its_own_rows_in_one_pass(pg_database: str) -> None:
    """A tenant holding few memories of a much larger table: its word channel tests its own
    rows instead of reading the table's GIN index once per phrase (whose entries for a
    common word are mostly other tenants'), with the same rows and scores, under a filter
    too; the large tenant keeps the index."""
    from recalld.records import MemoryFilter
    from recalld.stores.postgres import PostgresStore

    def opened(tenant: str) -> recalld.MemoryEngine:
        settings = Settings(db=pg_database, cache_dir=None, tenant=tenant)
        return recalld.open(settings=settings, embedder=FakeEmbedder())

    with opened("big") as big, opened("small") as small:
        for i in range(60):
            big.add(f"{WORDS[i % 4]} {WORDS[(i + 1) % 4]} big note {i}", session_id="s1")
        for i in range(5):
            small.add(f"{WORDS[i % 4]} small note {i} {WORDS[0]}", session_id=f"s{i % 2}")
    store = PostgresStore(pg_database, Tenancy("small"))
    asks = [
        CandidateRequest(asks={"bm25": WordsAsk(limit, terms)}, filters=filters)
        for limit in (2, 40)
        for terms in (WORDS, ("zephyr",), ("small", "note"), ("absent",))
        for filters in (MemoryFilter(), MemoryFilter(session_id="s1"))
    ]
    assert "lex_firsts" in store._candidates_sql(asks[0])[0]
    one_pass = [store.candidates(a).get("bm25", []) for a in asks]
    big_store = PostgresStore(pg_database, Tenancy("big"))
    assert "lex_firsts" not in big_store._candidates_sql(asks[0])[0]
    big_store.close()
    store._visible_count = (10**6, 10**6, float("inf"))  # counted as large: the index
    assert "lex_firsts" not in store._candidates_sql(asks[0])[0]
    assert [store.candidates(a).get("bm25", []) for a in asks] == one_pass
    assert sum(len(found) for found in one_pass) > 10
    store.close()


def test_a_handle_seeing_several_small_namespaces_scores_their_rows_in_one_pass(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GIN index is read once per phrase and namespace seen, the one pass costs what the
    rows seen cost: the rows a handle may test in one pass grow with its namespaces
    (SCAN_ROWS_PER_NAMESPACE, at most SCAN_MAX_ROWS), with the same rows and scores as the
    index's."""
    from recalld.stores.postgres import PostgresStore, indexes

    monkeypatch.setattr(indexes, "SCAN_ROWS_PER_NAMESPACE", 6)
    monkeypatch.setattr(indexes, "SCAN_TABLE_SHARE", 5)
    assert indexes.scans_rows(6, 1) and not indexes.scans_rows(7, 1)
    assert indexes.scans_rows(12, 2) and not indexes.scans_rows(13, 2)
    monkeypatch.setattr(indexes, "SCAN_MAX_ROWS", 10)
    assert not indexes.scans_rows(12, 2)
    monkeypatch.setattr(indexes, "SCAN_MAX_ROWS", 10**6)
    for tenant, count in (("big", 80), ("left", 5), ("right", 5), ("alone", 10)):
        settings = Settings(db=pg_database, cache_dir=None, tenant=tenant)
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            engine.add_many(
                [
                    recalld.NewMemory(f"{WORDS[i % 4]} {tenant} note {i} {WORDS[0]}")
                    for i in range(count)
                ]  # fmt: skip
            )
    asks = [
        CandidateRequest(asks={"bm25": WordsAsk(limit, terms)})
        for limit in (2, 40)
        for terms in (WORDS, ("zephyr",), ("note", "right"), ("absent",))
    ]
    pair = PostgresStore(pg_database, Tenancy("left", ("right",)))  # 10 rows, 2 namespaces
    alone = PostgresStore(pg_database, Tenancy("alone"))  # 10 rows, 1 namespace
    try:
        assert "lex_firsts" in pair._candidates_sql(asks[0])[0]
        assert "lex_firsts" not in alone._candidates_sql(asks[0])[0]
        one_pass = [pair.candidates(a).get("bm25", []) for a in asks]
        pair._visible_count = (10**6, 10**6, float("inf"))  # counted as large: the index
        assert "lex_firsts" not in pair._candidates_sql(asks[0])[0]
        assert [pair.candidates(a).get("bm25", []) for a in asks] == one_pass
        assert sum(len(found) for found in one_pass) > 10
    finally:
        pair.close()
        alone.close()


def test_an_ordinary_roles_handle_uses_its_tenants_word_postings(pg_admin_dsn: str) -> None:
    """Row-Level Security binds the application's role: the handle must read whether its
    tenant has word postings behind the wall with its namespaces declared, or it never sees
    the tenant listed and scores every matching row (the tenant of 100k: seconds a search)."""

    from recalld.stores.base import Tenancy
    from recalld.stores.postgres import PostgresStore

    from .test_postgres_load import _memories, owned_database

    with owned_database(pg_admin_dsn, "recalld_words", temp_tables=True) as dsn:
        first = PostgresStore(dsn, Tenancy("alice"))
        try:
            first.insert(*_memories(0, 30))
        finally:
            first.close()
        _post_words(dsn, "alice")
        store = PostgresStore(dsn, Tenancy("alice"))
        try:
            assert store._word_postings
        finally:
            store.close()


def test_an_ordinary_roles_phrases_are_found_in_the_postings_not_by_a_table_scan(
    pg_admin_dsn: str,
) -> None:
    """Under Row-Level Security only leakproof tests may become index conditions beneath the
    wall, and the GIN index's containment (``@>``) is not one: a phrase of several tokens
    read through it was a scan of the whole table as the application's role (every
    tenant's rows; 1.4-2.5 s a phrase in the 1M database). A handle over postings finds a
    phrase's rows in them: its word statement scans no table, with the rows and scores of
    scoring every matching row, phrases repeating a token included."""

    from recalld.stores.postgres import PostgresStore

    from .test_postgres_load import owned_database

    texts = [
        f"{WORDS[i % 4]} {WORDS[(i + 1) % 4]} {WORDS[(i + 2) % 4]} note {i}" for i in range(40)
    ]
    texts += ["zephyr quartz zephyr quartz twice", "quartz zephyr reversed", "zephyr zephyr"]
    asks = [
        CandidateRequest(asks={"bm25": WordsAsk(limit, terms)})
        for limit in (3, 40)
        for terms in (
            ("zephyr quartz", "lantern"),
            ("quartz lantern meadow",),
            ("zephyr zephyr",),
            ("meadow zephyr", "note"),
        )  # fmt: skip
    ]
    with owned_database(pg_admin_dsn, "recalld_phrases", temp_tables=True) as dsn:
        for tenant, written in (("alice", texts), ("bob", texts[:30])):
            settings = Settings(db=dsn, cache_dir=None, tenant=tenant)
            with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
                engine.add_many([recalld.NewMemory(text) for text in written])
        _post_words(dsn, "alice")
        store = PostgresStore(dsn, Tenancy("alice"))
        try:
            assert store._word_postings
            for ask in asks:
                assert _tables_scanned(dsn, *store._candidates_sql(ask)) == [], ask
            found = [[(c.memory_id, c.score) for c in store.candidates(a)["bm25"]] for a in asks]
            store._word_postings = False
            assert [[(c.memory_id, c.score) for c in store.candidates(a)["bm25"]]
                    for a in asks] == found  # fmt: skip
            assert sum(len(f) for f in found) > 20
        finally:
            store.close()


def test_an_ordinary_roles_word_channel_tests_its_rows_instead_of_the_gin_index(
    pg_admin_dsn: str,
) -> None:
    """Beneath the tenant wall the GIN index's containment test is no index condition (not
    leakproof): as the application's role every GIN read of a large tenant without postings
    scanned the whole table, once per
    phrase (the 100k tenant of the 1M database: 2.7-14 s a question, one pass 0.45-1.2). A
    handle the wall binds tests the rows it sees in one pass: no table scanned, the same
    rows and scores as the GIN reads."""

    from recalld.records import MemoryFilter
    from recalld.stores.postgres import PostgresStore

    from .test_postgres_load import owned_database

    texts = [f"{WORDS[i % 4]} {WORDS[(i + 1) % 4]} note {i} {WORDS[0]}" for i in range(60)]
    asks = [
        CandidateRequest(asks={"bm25": WordsAsk(limit, terms)}, filters=filters)
        for limit in (3, 40)
        for terms in (WORDS, ("zephyr quartz", "note"), ("absent",))
        for filters in (MemoryFilter(), MemoryFilter(session_id="s1"))
    ]
    with owned_database(pg_admin_dsn, "recalld_walled", temp_tables=True) as dsn:
        for tenant in ("alice", "bob"):
            settings = Settings(db=dsn, cache_dir=None, tenant=tenant)
            with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
                engine.add_many(
                    [recalld.NewMemory(t, session_id=f"s{i % 2}") for i, t in enumerate(texts)]
                )
        store = PostgresStore(dsn, Tenancy("alice"))
        try:
            assert store._walled
            store._visible_count = (10**6, 10**6, float("inf"))  # counted as large
            for ask in asks:
                assert _tables_scanned(dsn, *store._candidates_sql(ask)) == [], ask
            one_pass = [store.candidates(a).get("bm25", []) for a in asks]
            store._walled = False  # the GIN reads: the same rows and scores
            assert [store.candidates(a).get("bm25", []) for a in asks] == one_pass
            assert sum(len(found) for found in one_pass) > 20
        finally:
            store.close()


def _tables_scanned(dsn: str, sql: str, params: Any) -> list[Any]:
    """The tables the statement scanned row by row, run as alice's handle runs it, with
    sequential scans priced as on a large table (one transaction: its own counts)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT set_config('recalld.namespaces', 'alice', false)")
        conn.execute("SET enable_seqscan = off")
        conn.execute(sql, params).fetchall()
        return conn.execute(
            "SELECT relname, seq_scan FROM pg_stat_xact_user_tables WHERE seq_scan > 0"
        ).fetchall()


def _post_words(dsn: str, tenant: str) -> None:
    """Build ``tenant``'s word postings as the database's owner sees that tenant."""
    import psycopg

    from recalld.stores.postgres import indexes as ix

    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT set_config('recalld.namespaces', %s, false)", (tenant,))
        assert ix.build_word_postings(conn, tenant) > 0


def test_a_phrase_reads_its_rarest_tokens_rows_not_every_tokens(pg_database: str) -> None:
    """A phrase of a common and a rare token: its rows come from the rare token's postings,
    the common one looked up in them (the planner drives from the rarer by the token
    column's statistics), not from both tokens' postings read whole and grouped (``brother
    s`` read 30,489 rows of ``s`` for 168); the same rows and scores as every row's."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    common = 2_000
    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        engine.add_many([f"note {i} of the day" for i in range(common)], dedupe=False)
        engine.add_many([f"zephyr note {i}" for i in range(5)] + ["zephyr alone"], dedupe=False)
        engine.build_index("words")
    store = PostgresStore(pg_database)
    ask = CandidateRequest(asks={"bm25": WordsAsk(10, ("zephyr note",))})
    try:
        sql, params = store._candidates_sql(ask)
        with psycopg.connect(pg_database) as conn:
            conn.execute("SELECT set_config('recalld.namespaces', 'default', false)")
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
        assert plan is not None
        assert _rows_of(plan[0][0]["Plan"], "word_postings") < common / 10
        found = store.candidates(ask)["bm25"]
        store._word_postings = False
        assert store.candidates(ask)["bm25"] == found and len(found) == 5
    finally:
        store.close()


def _rows_of(node: dict[str, Any], table: str) -> float:
    """The rows the plan ``node`` and those below it read from ``table``."""
    own = node["Actual Rows"] * node["Actual Loops"] if node.get("Relation Name") == table else 0
    return own + sum(_rows_of(child, table) for child in node.get("Plans", []))
