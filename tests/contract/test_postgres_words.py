"""The PostgreSQL word channel over word postings stops once its top k is proven: it reads
each word's postings of highest impact first, and its answer is that of scoring every
matching row, for any list length, depth read and filter."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.lexical import phrases
from recalld.records import MemoryFilter, NewMemory
from recalld.retrieval.channels import Need
from recalld.retrieval.channels import request as channel_request
from recalld.retrieval.query import understand
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest, Tenancy

pytestmark = pytest.mark.postgres

WORDS = [f"w{i}" for i in range(60)]
"""A vocabulary whose first words are common (Zipf-like draws below)."""


def _corpus(seed: int, size: int) -> list[str]:
    draw = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(WORDS))]
    out = []
    for _ in range(size):
        length = draw.choice([1, 2, 3, 5, 8, 13, 21, 34])
        out.append(" ".join(draw.choices(WORDS, weights, k=length)))
    return out


def _questions(seed: int, count: int) -> list[str]:
    draw = random.Random(seed)
    asked = [" ".join(draw.sample(WORDS[: draw.choice([8, 20, 60])], draw.randint(1, 6)))
             for _ in range(count)]  # fmt: skip
    return asked


def _terms(text: str) -> tuple[str, ...]:
    return understand(text, "hybrid", datetime(2025, 6, 1, tzinfo=UTC)).terms


def _words(store: Any, request: CandidateRequest) -> list[tuple[str, float]]:
    return [(c.memory_id, c.score) for c in store.candidates(request).get("bm25", [])]


def _proven(store: Any, request: CandidateRequest) -> bool:
    """Whether the early stop proved this request's top k (``lex_early.proven``)."""
    from recalld.stores.postgres import queries as q

    ask = request.asks["bm25"]
    where, params = q.filter_sql(request.filters, store._visible)
    ctes, more = q.top_words_ctes(phrases(ask.terms), where, store._visible[0])  # type: ignore[attr-defined]
    sql = f"WITH {', '.join(ctes)} SELECT proven FROM lex_early"
    with store._read() as conn:
        found = conn.execute(sql, {**params, **more, "bm25_limit": ask.limit}).fetchone()  # type: ignore[attr-defined]
    return bool(found and found[0])


def test_the_early_stop_returns_the_exact_top_k(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from recalld.interfaces.cli import cli
    from recalld.stores.postgres import PostgresStore
    from recalld.stores.postgres import queries as postgres_queries

    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder="fake") as engine:  # fmt: skip
        added = engine.add_many([NewMemory(text, session_id=f"s{i % 7}")
                                 for i, text in enumerate(_corpus(3, 900))])  # fmt: skip
        engine.forget([a.id for a in added[::50]])  # forgotten rows count, as FTS5's do
    built = CliRunner().invoke(cli, ["--db", pg_database, "postgres", "word-index"])
    assert built.exit_code == 0, built.output
    requests = [
        channel_request(Need({"bm25": limit}, _terms(text), text), filters)
        for text in _questions(5, 40)
        for limit in (1, 5, 40)
        for filters in (MemoryFilter(), MemoryFilter(session_id="s1"))
    ]
    # Phrases of two tokens (read whole, from the rows holding both) beside single words.
    requests += [CandidateRequest(asks={"bm25": WordsAsk(limit, terms)})
                 for terms in (("w0-w1", "w2"), ("w3-w0", "w17"), ("w1-w2",))
                 for limit in (1, 5, 40)]  # fmt: skip
    exact = PostgresStore(pg_database, Tenancy())
    exact._word_postings = False  # scores every matching row on the table
    expected = [_words(exact, r) for r in requests]
    exact.close()
    store = PostgresStore(pg_database, Tenancy())
    assert store._word_postings
    for factor in (0, 1, 2, postgres_queries.WORD_DEPTH_FACTOR, 50):
        monkeypatch.setattr(postgres_queries, "WORD_DEPTH_FACTOR", factor)
        found = [_words(store, r) for r in requests]
        assert found == expected, factor
    # Not vacuous: at the default depth some live-row searches stop early, some do not.
    monkeypatch.undo()
    live = [r for r in requests if r.filters == MemoryFilter()
            and any(len(p) == 1 for p in phrases(r.asks["bm25"].terms))]  # type: ignore[attr-defined]  # fmt: skip
    proofs = [_proven(store, r) for r in live]
    assert 0 < sum(proofs) < len(live)
    assert sum(len(e) for e in expected) > 1000
    store.close()


def test_postings_built_before_impacts_get_them_when_the_store_opens(pg_database: str) -> None:
    """Migration 10 gives postings written before it (no ``impact``, no ``avgdl``) the
    impacts a build gives them now, in every namespace, behind the tenant wall."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    for tenant in ("default", "other"):
        with recalld.open(settings=Settings(db=pg_database, cache_dir=None, tenant=tenant),
                          embedder="fake") as engine:  # fmt: skip
            engine.add_many([NewMemory(t) for t in _corpus(11, 60)])
            engine.build_index("words")

    def impacts() -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_database) as conn:
            conn.execute("SELECT set_config('recalld.namespaces', 'default,other', false)")
            rows = conn.execute("SELECT namespace, pk, token, impact FROM word_postings"
                                " ORDER BY 1, 2, 3").fetchall()  # fmt: skip
            return rows + conn.execute("SELECT * FROM word_namespaces ORDER BY 1").fetchall()

    built = impacts()
    assert len(built) > 200 and all(r[-1] is not None and r[-1] > 0 for r in built)
    with psycopg.connect(pg_database) as conn:
        conn.execute("SELECT set_config('recalld.namespaces', 'default,other', false)")
        conn.execute("UPDATE word_postings SET impact = NULL")
        conn.execute("UPDATE word_namespaces SET avgdl = NULL")
        conn.execute("DELETE FROM recalld_migrations WHERE id = 10")
    PostgresStore(pg_database).close()
    assert impacts() == built
