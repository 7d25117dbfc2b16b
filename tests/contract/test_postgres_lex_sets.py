"""The word channel's one pass on PostgreSQL tests each row's set of distinct tokens
(``lex_set``, migration 12) for the question's words: every word as it is (quotes,
backslashes, the ``tsquery`` operators, spaces, CJK), rows without words or without a set
(tokens a set cannot hold) included; an existing database migrates and answers the same."""

from __future__ import annotations

import random
from typing import Any

import pytest

import recalld
from recalld.config import Settings
from recalld.lexical import tokenize
from recalld.providers.embedders import FakeEmbedder
from recalld.records import MemoryFilter, TimeRange
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest, Tenancy

from .test_postgres_load import _memories as load_batch, owned_database

pytestmark = pytest.mark.postgres

ODD_WORDS = ["it's", "a\\b", "x y", "&|!", "():*", "'", "\\", "''", "a:*", "!b", "日本", "😀"]
"""Words no tokenizer of ours makes, each of which the ``tsquery`` text must keep whole."""


def test_each_word_of_a_question_matches_exactly_the_rows_holding_it(pg_database: str) -> None:
    """The ``tsquery`` of a question's words, built from untrusted text, matches a row's set
    when it holds one of them and only then, whatever characters they hold: fixed odd
    words and random strings over quotes, backslashes, operators and spaces."""
    import psycopg

    from recalld.stores.postgres import PostgresStore
    from recalld.stores.postgres.word_sql import words_query

    PostgresStore(pg_database).close()  # the schema, with recalld_lex_set
    rng = random.Random(42)
    pool = "ab'\\ |&!():*<->日😀\t"
    words = ODD_WORDS + ["".join(rng.choice(pool) for _ in range(rng.randint(1, 6)))
                         for _ in range(150)]  # fmt: skip
    words += ["w" * 2000, "~" + "0" * 64]
    words = list(dict.fromkeys(words))
    with psycopg.connect(pg_database) as conn:
        for word in words:
            found = conn.execute(
                "SELECT array_agg(w ORDER BY o) FROM unnest(%s::text[]) WITH ORDINALITY AS x(w, o)"
                " WHERE recalld_lex_set(ARRAY[w]) @@ %s::tsquery",
                (words, words_query([word])),
            ).fetchone()
            assert found is not None and found[0] == [word], word
        both = conn.execute(
            "SELECT recalld_lex_set(%s::text[]) @@ %s::tsquery, recalld_lex_set('{}') @@"
            " %s::tsquery",
            (["plain", "x y"], words_query(["zzz", "x y"]), words_query(words)),
        ).fetchone()
        assert both == (True, False)
    assert words_query(["", "a", "a"]) == "'a'"
    assert words_query([""]) is None


def _memories() -> list[recalld.NewMemory]:
    texts = [
        "zephyr quartz lantern",
        "zephyr's lantern, the meadow's quartz",
        "東京の天気は晴れです zephyr",
        "東京 大阪 天気",
        "!!! ... ???",  # no tokens
        "",
        "quartz " * 40 + "meadow",
        "back\\slash and 'quotes' and a|b & c:* zephyr",
        "x" * 3000 + " meadow",  # a token stored as its digest
    ]
    texts += [f"filler {i} lantern" if i % 3 else f"filler {i}" for i in range(40)]
    return [recalld.NewMemory(text or "-") for text in texts]


ASKS = [
    CandidateRequest(asks={"bm25": WordsAsk(limit, terms)}, filters=filters)
    for limit in (3, 40)
    for terms in (
        ("zephyr",),
        ("quartz", "meadow"),
        ("zephyr's lantern",),
        ("東京", "天気"),
        ("back\\slash", "a|b", "'quotes'"),
        ("x" * 3000,),
        ("absent",),
        ("filler", "lantern"),
    )
    for filters in (MemoryFilter(), MemoryFilter(time_range=TimeRange(None, None)))
]


SEE_BOTH = "SELECT set_config('recalld.namespaces', 'alice,bob', false)"
"""The tenant wall binds the database's owner too: it declares both tenants to see them."""


def _lists(store: Any) -> list[list[tuple[str, float]]]:
    return [[(c.memory_id, c.score) for c in store.candidates(a).get("bm25", [])] for a in ASKS]


def test_an_existing_database_migrates_to_word_sets_and_answers_the_same(
    pg_admin_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database of schema 11 (its rows written before the sets existed) gains a set for
    each row (the distinct tokens, or none where a set cannot hold them) and, as an
    ordinary role the tenant wall binds, the same word lists (ids, order, scores) as before
    and as the exact channel (the GIN index's reads); a row without a set is still found."""
    import psycopg

    from recalld.stores.postgres import PostgresStore, indexes, word_sql

    with owned_database(pg_admin_dsn, "recalld_lexsets", temp_tables=True) as dsn:
        settings = Settings(db=dsn, cache_dir=None, tenant="alice")
        with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
            engine.add_many(_memories(), dedupe=False)
        with recalld.open(settings=settings.model_copy(update={"tenant": "bob"}),
                          embedder=FakeEmbedder()) as engine:  # fmt: skip
            engine.add_many(_memories()[:5], dedupe=False)
        with psycopg.connect(dsn) as conn:  # back to schema 11, the rows kept
            conn.execute(SEE_BOTH)
            conn.execute("ALTER TABLE memories DROP COLUMN lex_set")
            conn.execute("DROP FUNCTION recalld_lex_set(text[])")
            conn.execute("DELETE FROM recalld_migrations WHERE id = 12")
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (
                len(_memories()) + 5,
            )
        with monkeypatch.context() as exact:
            exact.setattr(indexes, "word_engine", lambda *a, **k: word_sql.EVERY_ROW)
            store = PostgresStore(dsn, Tenancy("alice"))  # migrates
            try:
                assert store._walled
                expected = _lists(store)
            finally:
                store.close()
        assert sum(len(found) for found in expected) > 40
        with psycopg.connect(dsn) as conn:
            conn.execute(SEE_BOTH)
            counts = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE lex_set = array_to_tsvector(lex_tokens)),"
                " count(*) FILTER (WHERE lex_tokens = '{}' AND lex_set = ''::tsvector)"
                " FROM memories"
            ).fetchone()
            assert counts is not None and counts[0] == counts[1] and counts[2] >= 2
        store = PostgresStore(dsn, Tenancy("alice"))
        try:
            sql, _ = store._candidates_sql(ASKS[0])
            assert "lex_set @@" in sql and "lex_words" in sql  # the one pass, on the sets
            # One text for one to four phrases, of one token or several: prepared once.
            assert all(
                store._candidates_sql(a)[0] == sql for a in ASKS if a.filters == ASKS[0].filters
            )
            assert _lists(store) == expected
            zephyr = store.candidates(ASKS[0])["bm25"]
            with psycopg.connect(dsn) as conn:  # a row whose tokens a set cannot hold
                conn.execute(SEE_BOTH)
                conn.execute(
                    "UPDATE memories SET lex_tokens = lex_tokens || '{\"\"}'::text[] WHERE id = %s",
                    (zephyr[0].memory_id,),
                )
                assert conn.execute(
                    "SELECT lex_set IS NULL FROM memories WHERE id = %s", (zephyr[0].memory_id,)
                ).fetchone() == (True,)
            assert [c.memory_id for c in store.candidates(ASKS[0])["bm25"]][:1] == [
                zephyr[0].memory_id
            ]
        finally:
            store.close()


def test_every_write_keeps_the_set_of_its_tokens(pg_admin_dsn: str, pg_database: str) -> None:
    """Inserted (through the session table, by a bulk load, or one ``INSERT`` a row by a
    role without ``TEMP``) or replaced, a memory's set is its tokens' distinct ones."""
    import psycopg

    from recalld.stores.postgres import PostgresStore

    def check(dsn: str, rows: int) -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT set_config('recalld.namespaces', 'default', false)")
            found = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE lex_set = array_to_tsvector(lex_tokens))"
                " FROM memories"
            ).fetchone()
        assert found == (rows, rows)

    with recalld.open(settings=Settings(db=pg_database, cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        first = engine.add("zephyr quartz zephyr 東京").id
        engine.add_many([recalld.NewMemory(f"lantern {i} meadow") for i in range(30)])
        engine.update(first, content="meadow's lantern")
    with psycopg.connect(pg_database) as conn:
        changed = conn.execute(
            "SELECT lex_set = array_to_tsvector(%s::text[]) FROM memories WHERE id = %s",
            (tokenize("meadow's lantern"), first),
        ).fetchone()
    assert changed == (True,)
    store = PostgresStore(pg_database)
    try:
        memories, _ = load_batch(1000, 20)
        with store.bulk_load():
            store.insert(memories, None)
    finally:
        store.close()
    check(pg_database, 51)
    with owned_database(pg_admin_dsn, "recalld_lexsets", temp_tables=False) as dsn:
        with recalld.open(settings=Settings(db=dsn, cache_dir=None),
                          embedder=FakeEmbedder()) as engine:  # fmt: skip
            engine.add_many([recalld.NewMemory(f"row {i} by row") for i in range(5)])
        check(dsn, 5)


def test_the_one_pass_has_one_statement_text_per_number_of_slots() -> None:
    """The phrases fill 4, 8, 16 ... slots, the rest empty phrases; the text depends on the
    number of slots only, not on the phrases' tokens or lengths."""
    from recalld.stores.postgres.word_sql import padded, scan_ctes

    def text(query: list[list[str]]) -> str:
        return ", ".join(scan_ctes(query, "true")[0])

    assert text([["zephyr"]]) == text([["a", "b", "c"], ["d"], ["e", "f"], ["g"]])
    assert text([[w] for w in "abcde"]) == text([[w] for w in "abcdefgh"]) != text([["a"]])
    assert padded([["a", "b"]]) == [["a", "b"], [""], [""], [""]]
    assert len(padded([[w] for w in "abcdefghi"])) == 16
