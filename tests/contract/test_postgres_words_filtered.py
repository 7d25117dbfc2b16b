"""The PostgreSQL word channel over a tenant's word postings under a filter narrower than its
live rows, as an ordinary role that Row-Level Security binds: the rows read from the table
in score order until enough pass (or the few rows a narrow time window or session admits),
never the whole tenant, with the exact channel's rows, order and scores, ties included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import permutations
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import MemoryFilter, TimeRange
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest, Tenancy

from .test_postgres_load import owned_database
from .test_postgres_words import WORDS, _post_words

pytestmark = pytest.mark.postgres

START = datetime(2024, 1, 1, tzinfo=UTC)
FILLER = 400
"""Memories of alice holding no query word: a channel that reads only rows holding one
reads fewer rows than alice has."""


def _memories() -> list[recalld.NewMemory]:
    """Alice's: the four words in every order twice (equal scores: ties at any cut), fewer
    of them, and filler; types, tags, sessions, projects and times spread over them."""
    texts = [" ".join(p) + " note" for p in permutations(WORDS)] * 2
    texts += [f"{WORDS[i % 4]} {WORDS[(i + 1) % 4]} note {i}" for i in range(60)]
    texts += [f"filler text number {i}" for i in range(FILLER)]
    return [
        recalld.NewMemory(
            text,
            type=("event", "insight", "raw")[i % 3],
            event_time=START + timedelta(hours=6 * i),
            session_id=f"s{i % 4}",
            tags=("red",) if i % 2 else ("blue",),
            project="p1" if i % 5 == 0 else None,
        )
        for i, text in enumerate(texts)
    ]


FILTERS = (
    MemoryFilter(time_range=TimeRange(START + timedelta(days=3), START + timedelta(days=20))),
    MemoryFilter(types=("insight",)),
    MemoryFilter(tags=("red",)),
    MemoryFilter(session_id="s1"),
    MemoryFilter(project="p1", time_range=TimeRange(START, START + timedelta(days=30))),
    MemoryFilter(types=("chunk",)),  # admits no row
    MemoryFilter(types=("event",), include_forgotten=True),
)


def test_a_filtered_search_reads_the_postings_rows_not_the_tenant_as_the_role(
    pg_admin_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As an ordinary role, a filtered word search of a tenant with postings read every row
    of the tenant (one pass, 0.45-1.2 s at 100k). Now it reads only rows holding a query
    word, in score order until the list is full of rows that pass, or the rows a narrow
    time window or session admits, whichever branch runs: no table scanned, fewer rows
    fetched than the tenant holds, and the same ids, order and scores as the exact
    channel's one pass, ties at the cut included."""
    from recalld.stores.postgres import PostgresStore, word_filtered

    asks = [
        CandidateRequest(asks={"bm25": WordsAsk(limit, terms)}, filters=filters)
        for limit in (3, 40)
        for terms in (WORDS, ("zephyr quartz", "note"), ("absent",))
        for filters in FILTERS
    ]
    with owned_database(pg_admin_dsn, "recalld_filtered", temp_tables=True) as dsn:
        settings = Settings(db=dsn, cache_dir=None, tenant="alice")
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            ids = engine.add_many(_memories(), dedupe=False)
            engine.forget([ids[0].id, ids[30].id])
        settings = Settings(db=dsn, cache_dir=None, tenant="bob")
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            engine.add_many(_memories()[:100], dedupe=False)
        _post_words(dsn, "alice")
        store = PostgresStore(dsn, Tenancy("alice"))
        try:
            assert store._walled and store._word_postings
            alice_rows = len(_memories())
            for ask in asks:
                sql, params = store._candidates_sql(ask)
                assert "lex_walk" in sql, ask
                assert _rows_read(dsn, sql, params) < alice_rows, ask

            def lists() -> list[list[tuple[str, float]]]:
                return [[(c.memory_id, c.score) for c in store.candidates(a)["bm25"]]
                        for a in asks]  # fmt: skip

            found = lists()
            for first in (-1, 10**9):  # the walk always, the admitted rows whenever narrowed
                monkeypatch.setattr(word_filtered, "ADMITTED_FIRST_ROWS", first)
                assert lists() == found, first
            store._word_postings = False  # the exact channel: every row tested in one pass
            assert lists() == found
            assert sum(len(f) for f in found) > 100
            tied = found[asks.index(CandidateRequest(asks={"bm25": WordsAsk(3, WORDS)},
                                                     filters=FILTERS[2]))]  # fmt: skip
            assert len(tied) == 3 and len({s for _, s in tied}) == 1  # cut among equal scores
        finally:
            store.close()


def _rows_read(dsn: str, sql: str, params: Any) -> int:
    """The memories rows the statement fetched (none scanned whole: asserted), run as
    alice's handle runs it, sequential scans priced as on a large table."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT set_config('recalld.namespaces', 'alice', false)")
        conn.execute("SET enable_seqscan = off")
        conn.execute(sql, params).fetchall()
        found = conn.execute(
            "SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables"
            " WHERE relname = 'memories'"
        ).fetchone()
    assert found is not None and found[0] == 0, found
    return int(found[1])
