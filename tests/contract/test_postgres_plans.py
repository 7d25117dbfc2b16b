"""Plans of the PostgreSQL store's statements that their cost depends on (not their
answers, which the contract tests compare with SQLite's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory, TimeRange
from recalld.stores.asks import RecentAsk
from recalld.stores.base import CandidateRequest, Tenancy

pytestmark = pytest.mark.postgres


def test_a_tenants_newest_memories_of_a_window_are_read_from_the_time_index(
    pg_database: str,
) -> None:
    """The temporal channel without a query vector (newest first in a window) of a handle
    that sees one namespace reads the namespace's time index backwards and stops at its
    limit, instead of reading every row of the window and sorting them (a window of 62k
    rows of a 100k store cost 136 ms of CPU); a handle seeing several namespaces gets the
    same answer for its own."""
    from recalld.stores.postgres import PostgresStore

    now = datetime.now(UTC)
    for tenant in ("solo", "other"):
        settings = Settings(db=pg_database, cache_dir=None, tenant=tenant)
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            engine.add_many(
                [
                    NewMemory(f"{tenant} note {i}", event_time=now - timedelta(hours=i))
                    for i in range(120)
                ]  # fmt: skip
            )
    window = TimeRange(now - timedelta(days=30), now + timedelta(days=1))
    request = CandidateRequest(asks={"temporal": RecentAsk(10, window=window)})
    solo = PostgresStore(pg_database, Tenancy("solo"))
    both = PostgresStore(pg_database, Tenancy("solo", ("other",)))
    try:
        sql, values = solo._candidates_sql(request)
        with solo._read() as conn:
            conn.execute("SET enable_seqscan = off")  # a table this small is read whole
            conn.execute("SET enable_bitmapscan = off")
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + sql, values).fetchall())
            conn.execute("RESET enable_seqscan")
            conn.execute("RESET enable_bitmapscan")
        assert "Index Scan Backward using memories_ns_ref_time" in plan, plan
        every = CandidateRequest(asks={"temporal": RecentAsk(240, window=window)})
        found = [c.memory_id for c in solo.candidates(request)["temporal"]]
        own = [c.memory_id for c in solo.candidates(every)["temporal"]]
        mixed = [c.memory_id for c in both.candidates(every)["temporal"]]
        assert len(own) == 120 and found == own[:10]
        assert [i for i in mixed if i in set(own)] == own and len(mixed) == 240
    finally:
        solo.close()
        both.close()


def test_the_tenant_wall_leaves_a_tenants_rows_estimated_as_its_own(pg_database: str) -> None:
    """Under Row-Level Security (an ordinary role, as the application's) the wall's test
    must not be multiplied into the statistics of the store's own ``namespace =`` clause: a
    tenant of 901 rows among 1M was then planned as one row, and its search's nested loops
    cost 40 ms of server CPU instead of 12 (the tenant of 100k: 446 instead of 50). Here a
    tenant of 20 rows among 1,000 must be planned as at least a quarter of them, and the
    wall still admits exactly them."""
    import json

    import psycopg

    for tenant, count in (("few", 20), ("many", 980)):
        settings = Settings(db=pg_database, cache_dir=None, tenant=tenant)
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            engine.add_many([NewMemory(f"{tenant} note {i}") for i in range(count)])
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("ANALYZE memories")
        conn.execute("DROP ROLE IF EXISTS recalld_probe")
        conn.execute("CREATE ROLE recalld_probe")
        conn.execute("GRANT SELECT ON memories TO recalld_probe")
        conn.execute("SET ROLE recalld_probe")
        try:
            conn.execute("SELECT set_config('recalld.namespaces', 'few', false)")
            query = "SELECT m.id FROM memories m WHERE m.namespace = 'few'"
            seen = conn.execute(query).fetchall()
            plan = conn.execute("EXPLAIN (FORMAT JSON) " + query).fetchone()
        finally:
            conn.execute("RESET ROLE")
            conn.execute("DROP OWNED BY recalld_probe")
            conn.execute("DROP ROLE recalld_probe")
    assert plan is not None
    tree = plan[0] if isinstance(plan[0], list) else json.loads(plan[0])
    assert len(seen) == 20
    assert tree[0]["Plan"]["Plan Rows"] >= 5, tree
