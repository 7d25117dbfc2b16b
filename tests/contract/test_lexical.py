"""FTS5's tokens and BM25 outside SQLite (:mod:`recalld.lexical`), and PostgreSQL's word
channel built on them: the same tokens as the SQLite store indexes, the same scores."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

import recalld
from recalld import lexical
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.asks import WordsAsk
from recalld.stores.base import CandidateRequest

TEXTS = [
    "Caroline's running café: naïve résumé, I ran 5km in 23:10!",
    "The runners were running; runs run ran. RUNNING Runs",
    "Ærøskøbing straße ﬁne İstanbul Ελληνικά ΣΊΣΥΦΟΣ Ωmega ǅemal",
    "東京の友達と乌龙茶を飲んだ 한국어 텍스트 emoji 🚲🚲 bike",
    "don't won't can't it's o'clock e-mail foo_bar foo.bar 3.14 1,000 v2.0 #tag @user",
    "a" * 70 + " " + "b" * 3000 + " generalizations relational conditional hopefulness",
    "",
    "   ...   !!! ",
    "x y z 1 2 3 ab cd caresses ponies ties caress cats feed agreed plastered motoring sing",
    "naïveté coöperate façade piñata jalapeño crème brûlée Œuvre ÅSA Øl",
]


def _store_tokens(tmp_path: Path, texts: list[str]) -> list[list[str]]:
    """What the SQLite store's own FTS5 index holds for each text, in order."""
    path = tmp_path / "words.db"
    with recalld.open(settings=Settings(db=str(path), cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        ids = [engine.add(t).id for t in texts if t.strip()]
    db = sqlite3.connect(path)
    try:
        db.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, memories_fts, instance)")
        pks = {mid: pk for pk, mid in db.execute("SELECT pk, id FROM memories")}
        found: dict[int, dict[int, str]] = {}
        for doc, offset, term in db.execute("SELECT doc, offset, term FROM vocab"):
            found.setdefault(doc, {})[offset] = term
    finally:
        db.close()
    return [[lexical.stored(t) for _, t in sorted(found.get(pks[i], {}).items())] for i in ids]


def test_tokens_equal_the_sqlite_stores_index(tmp_path: Path) -> None:
    kept = [t for t in TEXTS if t.strip()]
    expected = _store_tokens(tmp_path, kept)
    assert lexical.tokenize_many(kept) == expected
    assert [lexical.tokenize(t) for t in kept] == expected  # one at a time, same tokens
    flat = {t for tokens in expected for t in tokens}
    assert {"run", "carolin", "cafe", "istanbul", "5km"} <= flat  # stemmed, folded
    assert any(t.startswith("~") for t in flat)  # the 3000-character token, as a digest
    assert lexical.tokenize("   ...   !!! ") == []
    many = [f"word{i} running" for i in range(lexical.BATCH * 2 + 7)]  # several batches
    assert lexical.tokenize_many(many)[-1] == [f"word{len(many) - 1}", "run"]


def test_the_reference_bm25_is_sqlites(tmp_path: Path) -> None:
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE f USING fts5(c, tokenize='{lexical.FTS5_TOKENIZE}')")
    docs = [*TEXTS, "running late again", "the runner's runs", "tea time", "run run run run"]
    db.executemany("INSERT INTO f(rowid, c) VALUES (?, ?)", enumerate(docs))
    tokens = lexical.tokenize_many(docs)
    terms = ["running", "caroline's", "tea", "!!!", "run"]
    query = lexical.phrases(terms)
    assert query == [["run"], ["carolin", "s"], ["tea"], ["run"]]  # "!!!" is no phrase
    hits = [sum(1 for t in tokens if lexical.phrase_hits(t, p)) for p in query]
    total = sum(len(t) for t in tokens)
    match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    rows = db.execute("SELECT rowid, bm25(f) FROM f WHERE f MATCH ?", (match,)).fetchall()
    assert len(rows) >= 5
    for rowid, raw in rows:
        assert lexical.bm25(tokens[rowid], query, len(docs), total, hits) == pytest.approx(
            -raw, rel=1e-12
        )


def test_a_batch_of_rows_scores_as_each_row_alone() -> None:
    """:func:`lexical.bm25_many` (the word index's winners scored in one FTS5 batch) gives
    :func:`lexical.bm25` of each row, to the bit: repeated tokens, phrases that overlap
    themselves, a phrase's tokens apart, rows without a match, a row of more than 127
    tokens."""
    docs = [*TEXTS, "run run run run", "new york new york new", "york new", "new new york",
            "caroline's caroline s caroline", "tea for two, two for tea",
            " ".join(["a long row", *["filler"] * 150, "new york"])]  # fmt: skip
    terms = ["new york", "new york new", "run", "caroline's", "two for tea", "york", "absent"]
    query = lexical.phrases(terms)
    tokens = lexical.tokenize_many(docs)
    hits = [sum(1 for t in tokens if lexical.phrase_hits(t, p)) for p in query]
    rows, total = len(docs) + 40, sum(len(t) for t in tokens) + 300  # a larger table's counts
    batch = lexical.bm25_many(docs, query, rows, total, hits)
    alone = [lexical.bm25(t, query, rows, total, hits) for t in tokens]
    assert batch == alone  # the same floats: each phrase's share summed in the same order
    assert sum(score > 0 for score in batch) >= 7 and 0.0 in batch
    assert len(tokens[-1]) > 127  # a length FTS5 writes in two bytes


def test_a_batch_scores_as_each_row_alone_over_many_random_rows() -> None:
    """The same, to the bit, over 600 rows of a small vocabulary (a batch past
    :data:`lexical.BATCH`, many repeats, phrases that overlap) and queries that repeat a
    phrase or hold one no row has."""
    rng = random.Random(45)
    vocabulary = ["new", "york", "run", "running", "tea", "two", "for", "city", "2023", "x"]
    docs = [
        " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 160))) for _ in range(600)
    ]
    tokens = lexical.tokenize_many(docs)
    for terms in (["new york", "run", "tea", "new york"], ["2023"], ["for two", "absent", "x"],
                  ["new new", "york york york", "city"]):  # fmt: skip
        query = lexical.phrases(terms)
        hits = [sum(1 for t in tokens if lexical.phrase_hits(t, p)) for p in query]
        rows, total = len(docs) + 1000, sum(len(t) for t in tokens) + 9000
        batch = lexical.bm25_many(docs, query, rows, total, hits)
        assert batch == [lexical.bm25(t, query, rows, total, hits) for t in tokens]
        assert sum(score > 0 for score in batch) >= 50


def test_a_batch_reads_each_rows_count_of_a_one_token_phrase_not_every_occurrence() -> None:
    """For a phrase of one token FTS5 counts each row's occurrences itself (one row back per
    row holding it, not one per occurrence), and a phrase no row of the table holds is not
    read at all: the word index's winners are scored with less Python at every search."""
    docs = ["run " * 500, "run tea " * 300, "tea time", "new york run"]
    query = lexical.phrases(["run", "tea", "new york", "absent"])
    tokens = lexical.tokenize_many(docs)
    hits = [sum(1 for t in tokens if lexical.phrase_hits(t, p)) for p in query]
    assert hits == [3, 2, 1, 0]
    statements: list[str] = []
    scorer = lexical._scorer()
    scorer.set_trace_callback(statements.append)
    try:
        batch = lexical.bm25_many(docs, query, 100, 4000, hits)
    finally:
        scorer.set_trace_callback(None)
    assert batch == [lexical.bm25(t, query, 100, 4000, hits) for t in tokens]
    reads = [s for s in statements if "FROM sv" in s]
    assert sum("count(*)" in s for s in reads) == 2  # "run" and "tea": counted by FTS5
    assert sum("offset" in s for s in reads) == 2  # "new" and "york": their occurrences
    assert not any("absent" in s for s in reads)  # held by no row: not read


@pytest.mark.postgres
def test_postgres_words_rank_as_fts5_with_statistics_kept_by_triggers(
    tmp_path: Path, pg_database: str
) -> None:
    import psycopg

    texts = [*(t for t in TEXTS if t.strip()), "running late again", "the runner's runs",
             "tea time", "run run run run", "Caroline's tea"]  # fmt: skip
    engines = [recalld.open(settings=Settings(db=location, cache_dir=None),
                            embedder=FakeEmbedder())
               for location in (str(tmp_path / "a.db"), pg_database)]  # fmt: skip
    try:
        for engine in engines:
            added = [engine.add(t, id=f"t{i:03d}").id for i, t in enumerate(texts)]
            for i in range(lexical_compact() + 5):  # past a compaction of the stats rows
                engine.add(f"filler number {i} about running", id=f"f{i:03d}")
            engine.forget(added[0])  # forgotten rows stay in FTS5's statistics
            engine.update(added[1], content="now about tea and runs")
            engine.forget(added[2], hard=True)
        request = CandidateRequest(asks={"bm25": WordsAsk(30, ("running", "caroline's", "tea"))})
        a, b = (e.store.candidates(request)["bm25"] for e in engines)
        assert len(a) == 30
        assert [c.memory_id for c in a] == [c.memory_id for c in b]
        assert [c.score for c in a] == pytest.approx([c.score for c in b], rel=1e-9)
    finally:
        for engine in engines:
            engine.close()
    with psycopg.connect(pg_database) as conn:
        stats = conn.execute("SELECT sum(rows), sum(tokens), count(*) FROM lexical_stats")
        rows, tokens, deltas = stats.fetchone()  # type: ignore[misc]
        real = conn.execute("SELECT count(*), sum(lex_length) FROM memories").fetchone()
        assert (rows, tokens) == real
        assert deltas < lexical_compact() + 10  # compacted at least once


def lexical_compact() -> int:
    from recalld.stores.postgres.migrations import LEXICAL_STATS_COMPACT

    return LEXICAL_STATS_COMPACT
