"""Smoke test of ``bench scale`` on a tiny corpus written here in the benchmarks' formats."""

from __future__ import annotations

import gzip
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from recalld.bench import scale_corpus as sc
from recalld.bench.scale import parse_clients, parse_sizes, parse_workers
from recalld.bench.scale_postgres import database_dsn
from recalld.errors import InvalidInputError
from recalld.interfaces.cli_scale import scale
from recalld.providers.embedders import FakeEmbedder
from recalld.records import NewMemory
from recalld.validation import prepare_memory

FIXTURE = Path(__file__).parent.parent / "fixtures" / "scale_turns.json"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """LongMemEval_S and LoCoMo files, in their real schemas, made from the fixture."""
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    sessions, questions = fixture["sessions"], fixture["questions"]
    half = len(sessions) // 2
    lme = [{
        "question_id": f"q{i}", "question_type": "single-session-user", "question": q,
        "answer": "-", "question_date": "2024/01/01 (Mon) 10:00",
        "haystack_session_ids": [f"s{n}" for n in range(half)],
        "haystack_dates": ["2023/12/01 (Fri) 10:00"] * half,
        "haystack_sessions": [[{"role": "user", "content": t} for t in s]
                              for s in sessions[:half]],
        "answer_session_ids": ["s0"],
    } for i, q in enumerate(questions[:5])]  # fmt: skip
    conversation: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for n, session in enumerate(sessions[half:], start=1):
        conversation[f"session_{n}"] = [{"speaker": "Ana", "dia_id": f"D{n}:{k}", "text": t}
                                        for k, t in enumerate(session, start=1)]  # fmt: skip
        conversation[f"session_{n}_date_time"] = "1:56 pm on 8 May, 2023"
    locomo = [{"sample_id": "conv-x", "conversation": conversation,
               "qa": [{"question": q, "answer": "-", "evidence": ["D1:1"], "category": 4}
                      for q in questions[5:]]}]  # fmt: skip
    (tmp_path / "data" / "longmemeval").mkdir(parents=True)
    (tmp_path / "data" / "locomo").mkdir()
    with gzip.open(tmp_path / "data" / sc.LONGMEMEVAL_FILE, "wt", encoding="utf-8") as handle:
        json.dump(lme, handle)
    (tmp_path / "data" / sc.LOCOMO_FILE).write_text(json.dumps(locomo), encoding="utf-8")
    return tmp_path / "data"


def test_sources_and_snippets_come_from_both_files(data_dir: Path) -> None:
    source = sc.read_sources(data_dir)
    assert len(source.turns) == 40
    assert len(source.questions) == 10
    pieces = sc.snippets(source.turns)
    assert len(pieces) >= 40
    assert all(sc.SNIPPET_MIN_CHARS <= len(p) <= sc.SNIPPET_MAX_CHARS for p in pieces)


def test_synthetic_memories_are_distinct_and_independent_of_corpus_size(data_dir: Path) -> None:
    source = sc.read_sources(data_dir)
    pool = sc.build_pool(sc.snippets(source.turns), 30, 3, FakeEmbedder(32))
    whole = sc.memories(pool, 0, 600, 3, "fp")
    part = sc.memories(pool, 200, 400, 3, "fp")
    assert [m.content for m in whole[200:400]] == [m.content for m in part]
    assert len({m.content for m in whole}) == 600
    # What the facade computes of a new memory's text, a synthetic one carries too.
    added = [prepare_memory(NewMemory(content=m.content, type="turn"), m.created_at,
                            max_content_chars=10_000, namespace_for=lambda n: n or "default")
             for m in whole[:200]]  # fmt: skip
    assert [m.tells_event for m in whole[:200]] == [a.tells_event for a in added]
    assert {m.tells_event for m in whole[:200]} == {True, False}
    vectors = sc.derived_vectors(pool, 0, 600, 3)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[200:400], sc.derived_vectors(pool, 200, 400, 3))
    with pytest.raises(InvalidInputError, match="bigger pool"):
        next(sc.blocks(pool, sc.max_size(pool) + 1, 3))


def test_parse_sizes() -> None:
    assert parse_sizes("10000, 100k,1M") == (10_000, 100_000, 1_000_000)
    with pytest.raises(InvalidInputError):
        parse_sizes("ten")


def test_cli_runs_end_to_end(data_dir: Path, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    report_dir = tmp_path / "report"
    result = CliRunner().invoke(scale, [
        "--sizes", "300,600", "--queries", "3", "--embedder", "fake:64", "--pool", "40",
        "--data", str(data_dir), "--workdir", str(tmp_path / "work"),
        "--report", str(report_dir), "--json", "--clients", "1,3", "--load-seconds", "0.5",
        "--p99-ms", "5000",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[: result.output.rindex("}") + 1])
    assert [r["size"] for r in report["results"]] == [300, 600]
    for row in report["results"]:
        assert row["file_bytes"] > 0
        assert row["build"]["insert_s"] > 0
        for key in ("vector", "hybrid", "numpy", "fts5", "embed"):
            assert 0 < row["search"][key]["p50_ms"] <= row["search"][key]["p95_ms"]
        # Each stage's time, from the searches' own clocks: within the whole search's.
        stages = row["search"]["stages"]
        assert {"understand", "embed", "candidates", "fuse", "adjust", "assemble"} <= set(stages)
        parts = sum(v["mean_ms"] for k, v in stages.items() if k != "took")
        assert 0 < parts <= stages["took"]["mean_ms"] + 1e-6
        # The load went through a real `recalld serve` on the store, searches only.
        assert [level["clients"] for level in row["load"]] == [1, 3]
        for level in row["load"]:
            assert level["searches_per_s"] > 0 and level["errors"] == 0 and level["adds"] == 0
            assert 0 < level["p50_ms"] <= level["p95_ms"] <= level["p99_ms"]
        # Then the capacity search at the most clients: four scheduled runs, bisecting
        # below the closed loop's rate; a schedule never sends faster than its rate.
        (capacity,), closed = row["capacity"], row["load"][1]
        assert capacity["workers"] == 1 and closed["workers"] == 1
        assert capacity["clients"] == 3 and capacity["p99_target_ms"] == 5000
        rates = [t["rate"] for t in capacity["tries"]]
        assert len(rates) == 4 and rates[0] == pytest.approx(0.8 * closed["searches_per_s"])
        assert all(0 < r < closed["searches_per_s"] for r in rates)
        for done in capacity["tries"]:
            assert done["searches_per_s"] <= done["rate"] * 1.1 and done["errors"] == 0
        assert capacity["best"] in [{k: v for k, v in t.items() if k != "held"}
                                    for t in capacity["tries"] if t["held"]]  # fmt: skip
    assert report["corpus"]["pool"] == 40
    table = (report_dir / "scale.md").read_text(encoding="utf-8")
    assert "| 300 |" in table and "| 600 |" in table
    assert "| 600 | sqlite | 1 | 1 | 3 |" in table
    assert "| 600 | sqlite | 1 | 3 | 5000 |" in table  # the capacity row
    assert "Where a hybrid search's time goes" in table and "| understand | embed |" in table
    assert report["embedder"]["setting"] == "fake:64"
    assert "Embedder: `fake:64`: fake-hash (64-d" in table
    assert (report_dir / "scale.png").read_bytes()[:4] == b"\x89PNG"
    # A second run reuses the stores it built; without matplotlib it skips the chart alone.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    again = CliRunner().invoke(scale, [
        "--sizes", "300", "--queries", "2", "--embedder", "fake:64", "--pool", "40",
        "--data", str(data_dir), "--workdir", str(tmp_path / "work"),
        "--report", str(tmp_path / "again"), "--clients", "0",
    ])  # fmt: skip
    assert again.exit_code == 0, again.output
    assert "come from an earlier run's build" in again.output
    assert "chart skipped: it needs matplotlib" in again.output
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == ["scale.json", "scale.md"]
    assert "Load through" not in again.output


def test_parse_clients() -> None:
    assert parse_clients("8, 32,8") == (8, 32)
    assert parse_clients("0") == () and parse_clients("") == ()
    with pytest.raises(InvalidInputError, match="not a client count"):
        parse_clients("eight")


def test_the_load_takes_turns_over_the_worker_counts(data_dir: Path, tmp_path: Path) -> None:
    """`--workers 1,2 --load-rounds 2`: one server per count, their runs in turns, each with
    the server's CPU time a search (every process of it counted)."""
    result = CliRunner().invoke(scale, [
        "--sizes", "300", "--queries", "3", "--embedder", "fake:64", "--pool", "40",
        "--data", str(data_dir), "--workdir", str(tmp_path / "work"), "--json",
        "--clients", "2", "--workers", "1,2", "--load-rounds", "2", "--load-seconds", "0.5",
        "--p99-ms", "0",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[: result.output.rindex("}") + 1])
    (row,) = report["results"]
    assert [(r["round"], r["workers"]) for r in row["load"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for level in row["load"]:
        assert level["searches_per_s"] > 0 and level["errors"] == 0
        assert sum(level["per_worker"]) == level["requests"]  # every answer says who gave it
        assert len(level["per_worker"]) <= level["workers"]
        if sys.platform.startswith("linux"):
            assert level["server_cpu_ms_per_search"] > 0
    assert row["capacity"] == []
    assert parse_workers("2, 1,2") == (2, 1)
    with pytest.raises(InvalidInputError):
        parse_workers("0")


def test_cli_refuses_sizes_the_pool_cannot_make(data_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(scale, [
        "--sizes", "5000", "--queries", "2", "--embedder", "fake:64", "--pool", "40",
        "--data", str(data_dir), "--workdir", str(tmp_path / "work"),
    ])  # fmt: skip
    assert result.exit_code == 2
    assert "raise --pool" in result.output
    assert not list((tmp_path / "work").glob("*.db"))


def test_cli_names_a_missing_data_folder(tmp_path: Path) -> None:
    result = CliRunner().invoke(scale, ["--data", str(tmp_path / "nowhere"), "--sizes", "10"])
    assert result.exit_code == 2
    assert "benchmark file not found" in result.output


@pytest.mark.postgres
def test_cli_runs_both_backends_side_by_side(
    data_dir: Path, tmp_path: Path, pg_admin_dsn: str
) -> None:
    import psycopg

    args = ["--sizes", "300", "--queries", "3", "--embedder", "fake:64", "--pool", "40",
            "--data", str(data_dir), "--workdir", str(tmp_path / "work"), "--clients", "0",
            "--backends", "sqlite,postgres", "--postgres", pg_admin_dsn]  # fmt: skip
    try:
        result = CliRunner().invoke(scale, [*args, "--report", str(tmp_path / "r"), "--json",
                                            "--clients", "2", "--load-seconds", "0.5"])  # fmt: skip
        assert result.exit_code == 0, result.output
        report = json.loads(result.output[: result.output.rindex("}") + 1])
        rows = {row["backend"]: row for row in report["results"]}
        assert set(rows) == {"sqlite", "postgres"}
        assert rows["postgres"]["file_bytes"] > 0 and rows["postgres"]["index_bytes"] > 0
        for row in rows.values():  # a server on each backend's store answered the load
            (level,) = row["load"]
            assert level["clients"] == 2 and level["searches_per_s"] > 0 and not level["errors"]
        for key in ("vector", "hybrid", "embed", "vector_floor", "text_floor"):
            assert rows["postgres"]["search"][key]["p50_ms"] > 0
        # Searched as a user's server connects: the application's role, walled in.
        assert rows["postgres"]["searched_as"] == {"role": "recalld_app", "row_security": True}
        assert report["options"]["postgres_role"] == "recalld_app"
        assert "numpy" in rows["sqlite"]["search"] and "numpy" not in rows["postgres"]["search"]
        # PostgreSQL loads in bulk: the vector index is built once, after the rows.
        assert rows["postgres"]["build"]["bulk_load"] and not rows["sqlite"]["build"]["bulk_load"]
        built = rows["postgres"]["build"]
        assert 0 < built["vector_index_s"] < built["build_s"]
        with psycopg.connect(database_dsn(pg_admin_dsn, "recalld_scale_300")) as conn:
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (300,)
        table = (tmp_path / "r" / "scale.md").read_text(encoding="utf-8")
        assert "| 300 | sqlite |" in table and "| 300 | postgres |" in table
        assert "vector index" in table
        assert "PostgreSQL searched as role recalld_app: Row-Level Security binds it" in table
        again = CliRunner().invoke(scale, args)  # the PostgreSQL store is reused as well
        assert again.exit_code == 0, again.output
        assert "Build figures for 300, 300 come from an earlier run's build" in again.output
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS recalld_scale_300 WITH (FORCE)")


@pytest.mark.postgres
def test_the_search_dsn_is_a_role_the_tenant_wall_binds(pg_admin_dsn: str) -> None:
    """The DSN the bench's searches use logs in as the application's role: Row-Level
    Security is active for it, so it sees only the namespaces it declares; the admin's
    DSN (an empty role) passes through the wall."""
    import psycopg

    from recalld.bench import scale_postgres as sp
    from recalld.records import Memory
    from recalld.stores.base import Tenancy
    from recalld.stores.postgres import PostgresStore
    from recalld.text import content_hash

    name = "recalld_scale_role_probe"
    sp.recreate(pg_admin_dsn, name)
    try:
        admin = database_dsn(pg_admin_dsn, name)
        now = datetime.now(UTC)
        other = PostgresStore(admin, Tenancy("other"))  # the admin builds, as the bench does
        walled = Memory(id="m1", content="walled", type="event", created_at=now,
                        updated_at=now, content_hash=content_hash("walled"))  # fmt: skip
        other.insert([walled], None)
        other.close()
        searcher = sp.role_dsn(pg_admin_dsn, name, "recalld_app")
        with psycopg.connect(searcher) as conn:
            user, walled = conn.execute(
                "SELECT current_user, row_security_active('memories')").fetchone()  # fmt: skip
            assert (user, walled) == ("recalld_app", True)
            conn.execute("SELECT set_config('recalld.namespaces', 'default', false)")
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)
            conn.execute("SELECT set_config('recalld.namespaces', 'other', false)")
            assert conn.execute("SELECT count(*) FROM memories").fetchone() == (1,)
        assert sp.role_dsn(pg_admin_dsn, name, "") == admin
        # An admin DSN that may not make the role: one sentence, not a traceback.
        with pytest.raises(InvalidInputError, match="cannot search as the role recalld_nob"):
            sp.role_dsn(searcher.replace("/" + name, "/postgres"), name, "recalld_nobody")
        with psycopg.connect(admin) as conn:
            assert conn.execute("SELECT row_security_active('memories')").fetchone() == (False,)
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_cli_refuses_postgres_without_a_dsn(data_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(scale, [
        "--sizes", "300", "--queries", "2", "--embedder", "fake:64", "--pool", "40",
        "--data", str(data_dir), "--workdir", str(tmp_path / "work"), "--backends", "postgres",
    ])  # fmt: skip
    assert result.exit_code == 2
    assert "needs --postgres DSN" in result.output
    assert not list((tmp_path / "work").glob("*.db"))
