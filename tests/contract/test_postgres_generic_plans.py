"""A small tenant's search statements run on generic plans (planned once per prepared
statement), with the same answers; a larger tenant's keep the server's default."""

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
