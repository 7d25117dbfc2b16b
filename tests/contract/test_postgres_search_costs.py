"""The PostgreSQL search statement's own costs: the session neighbours found without
comparing every pair of members, with the neighbours the store's own read gives; and the
word channel over postings equal to every matching row's for awkward questions."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.asks import NearestAsk, WordsAsk
from recalld.stores.base import CandidateRequest

pytestmark = pytest.mark.postgres

SESSIONS = 12
TURNS = 15
MEMBERS = re.compile(r"\brn\b|\bmembers\.")
WORDS = ("zephyr", "quartz", "lantern", "meadow", "harbor", "cinder")


def _plan(dsn: str, sql: str, values: dict[str, Any], namespaces: str) -> dict[str, Any]:
    """``EXPLAIN (ANALYZE)`` of ``sql`` as the store sends it, its top node."""
    import psycopg

    from recalld.stores.postgres.loaders import register
    from recalld.stores.postgres.statements import positional

    raw, names = positional(sql)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register(conn)
        conn.execute("SELECT set_config('recalld.namespaces', %s, false)", (namespaces,))
        cursor = psycopg.RawCursor(conn)
        row = cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + raw, [values[n] for n in names]
        ).fetchone()
    assert row is not None
    return dict(row[0][0]["Plan"])


def _member_joins(node: dict[str, Any]) -> list[str]:
    """The join filters of ``node`` and those below it that compare session members (their
    places ``rn``, or the ``members`` CTE), with the rows each dropped."""
    found = node.get("Join Filter", "")
    own = [f"{found}: {node.get('Rows Removed by Join Filter')}"] if MEMBERS.search(found) else []
    return own + [j for child in node.get("Plans", []) for j in _member_joins(child)]


def _chats(engine: recalld.MemoryEngine) -> list[list[str]]:
    """:data:`SESSIONS` chats of :data:`TURNS` turns added interleaved (a session's turns
    are not neighbours in the table), about one turn in six forgotten, and loose notes."""
    rng = random.Random(11)
    chats: list[list[str]] = [[] for _ in range(SESSIONS)]
    for turn in range(TURNS):
        for s in rng.sample(range(SESSIONS), SESSIONS):
            text = f"{WORDS[(s + turn) % 6]} turn {turn} of chat {s} {WORDS[turn % 6]}"
            chats[s].append(engine.add(text, session_id=f"chat{s}").id)
    engine.add_many([recalld.NewMemory(f"a loose {w} note") for w in WORDS])
    engine.forget([i for chat in chats for i in chat if rng.random() < 0.17])
    return chats


def test_a_searchs_session_neighbours_come_from_its_sessions_in_order_not_from_pairs(
    pg_database: str,
) -> None:
    """Each candidate's neighbours in its session, at every radius, are those the store's
    own read of neighbours gives (forgotten turns skipped, a session's ends, candidates
    next to each other); and the statement finds them without a join comparing members:
    the join it replaced, planned as nested loops (the planner estimates these CTEs at one
    row), compared every near candidate with every member of the searched sessions."""
    from recalld.stores.postgres.queries import search_rows_sql
    from recalld.stores.postgres.searching import ROWS_DEPTH

    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        chats = _chats(engine)
        store = engine.store
        assert sum(len(chat) for chat in chats) > 150
        compared = []
        for radius, depth in ((0, 20), (1, 20), (2, 40), (3, 8), (TURNS + 2, 60)):
            for query in ("zephyr turn", "quartz lantern chat 3", "meadow harbor cinder"):
                vector = engine.embedder.embed_query(query)
                asks = {"semantic": NearestAsk(60, vector), "bm25": WordsAsk(60, (query,))}
                request = CandidateRequest(asks=asks)
                found = store.search_rows([request], neighbor_radius=radius,
                                          neighbor_depth=depth)  # fmt: skip
                assert dict(found.neighbors) == store.session_neighbors(
                    sorted(found.neighbors_of), radius
                ), (radius, depth, query)
                sql, values = search_rows_sql(
                    [store._candidates_sql(request)], vectors=False, radius=radius,
                    depth=depth, rows_depth=ROWS_DEPTH,
                )  # fmt: skip
                values.update(namespaces=store._visible, tenant=store.tenancy.tenant)
                plan = _plan(pg_database, sql, values, "default")
                compared.append(_member_joins(plan))
                if radius:
                    assert found.neighbors and any(found.neighbors.values())
        # No join compares members (a tiny table's candidates may still be looked up by
        # a join filter, which is the planner's choice for a table of 200 rows).
        assert compared and not any(compared), compared


def test_a_word_statement_over_postings_equals_every_rows_for_awkward_questions(
    pg_database: str,
) -> None:
    """Over a tenant's word postings, the rows and scores of scoring every matching row, for
    repeated words, absent ones, forgotten rows, phrases of several tokens and lists longer
    than the matches (the cases a change to how postings are gathered and counted must
    keep)."""
    from recalld.stores.postgres import PostgresStore

    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        _chats(engine)
        engine.build_index("words")
    questions = [
        ("zephyr", "quartz", "lantern"),
        ("meadow", "meadow", "absentword"),
        ("harbor turn", "cinder"),
        ("chat", "turn", "of", "zephyr", "quartz", "lantern", "meadow", "harbor", "cinder"),
        ("nothing", "here"),
    ]
    store = PostgresStore(pg_database)
    try:
        assert store._word_postings
        lists = []
        for terms in questions:
            for limit in (3, 40, 200):
                ask = CandidateRequest(asks={"bm25": WordsAsk(limit, terms)})
                found = store.candidates(ask).get("bm25", [])
                store._word_postings = False
                assert store.candidates(ask).get("bm25", []) == found, (terms, limit)
                store._word_postings = True
                lists.append(found)
        assert sum(len(found) for found in lists) > 300
    finally:
        store.close()


def test_the_postings_scored_rows_go_to_the_sort_without_being_stored(pg_database: str) -> None:
    """Every row holding a phrase is scored on the postings, and only the best are kept: the
    scored rows go straight into the sort for the best, not first into a stored CTE of
    every row (36k rows for eight common words in the 1M database, 4 MB: written to a
    temporary file, 17 ms of that statement's ~100). When the best rows do not prove the
    list (a list as long as the matches here), the rows are scored again for the rest:
    either way, the rows and scores of scoring every matching row."""
    from recalld.stores.postgres import PostgresStore

    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        _chats(engine)
        engine.build_index("words")
    store = PostgresStore(pg_database)
    try:
        for limit in (5, 400):  # the best prove the list / every row is needed
            ask = CandidateRequest(asks={"bm25": WordsAsk(limit, ("zephyr", "turn", "chat"))})
            plan = _plan(pg_database, *store._candidates_sql(ask), "default")
            assert _cte_scans(plan, "lex_sum") == [], limit
            found = store.candidates(ask)["bm25"]
            store._word_postings = False
            assert store.candidates(ask)["bm25"] == found and found
            store._word_postings = True
    finally:
        store.close()


def _cte_scans(node: dict[str, Any], name: str) -> list[float]:
    """The rows read by the executed scans of the stored CTE ``name`` under ``node``."""
    own = (
        [node["Actual Rows"]]
        if node.get("CTE Name") == name and node.get("Actual Loops", 0) > 0
        else []
    )
    return own + [r for child in node.get("Plans", []) for r in _cte_scans(child, name)]
