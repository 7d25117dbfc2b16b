"""The CLI's finer behaviour through click's CliRunner (in process, fake embedder)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import recalld
from recalld.interfaces.cli import EXIT_SKIPPED_LINES, cli

Run = Callable[..., Result]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "cli.db"


@pytest.fixture
def run(db: Path, cli_env: dict[str, str]) -> Run:
    # CliRunner only adds to the real environment: unset any RECALLD_* the developer has.
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    env.update({k: v for k, v in cli_env.items() if k.startswith("RECALLD_")})

    def _run(*args: str, input: str | bytes | None = None, embedder: str = "fake") -> Result:
        argv = ["--db", str(db), "--embedder", embedder, *args]
        return CliRunner().invoke(cli, argv, input=input, env=env, catch_exceptions=False)

    return _run


def ok(result: Result) -> Any:
    """The parsed JSON output of a successful command."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def failed(result: Result, code: int) -> str:
    """A failure is one line on stderr, with the documented exit code."""
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    return result.stderr


def test_add_get_list_json(run: Run) -> None:
    added = ok(run("--json", "add", "The deploy key is in the vault", "--tag", "ops", "--tag",
                   "keys", "--project", "infra", "--event-time", "2024-03-14T09:30",
                   "--type", "insight", "--priority", "1.5", "--pinned"))  # fmt: skip
    assert added["created"] is True and added["duplicate_of"] is None
    memory = ok(run("--json", "get", added["id"]))
    assert memory["content"] == "The deploy key is in the vault"
    assert memory["tags"] == ["ops", "keys"] and memory["project"] == "infra"
    assert memory["type"] == "insight" and memory["priority"] == 1.5 and memory["pinned"] is True
    assert memory["event_time"].startswith("2024-03-14T09:30:00")
    listed = ok(run("--json", "list", "--tag", "ops"))
    assert [m["id"] for m in listed] == [added["id"]]
    assert ok(run("--json", "list", "--tag", "missing")) == []


def test_add_from_stdin_and_duplicates(run: Run) -> None:
    first = run("add", input="remember the milk\n")
    assert first.exit_code == 0 and first.stdout.startswith("stored ")
    memory_id = first.stdout.split()[1]
    again = run("add", "-", input="remember the milk")
    assert again.stdout.strip() == f"not stored: identical to existing memory {memory_id}"
    as_json = ok(run("--json", "add", "remember the milk"))
    assert as_json["created"] is False and as_json["duplicate_of"] == memory_id
    assert len(ok(run("--json", "list"))) == 1


@pytest.mark.parametrize(
    ("args", "stdin", "needle"),
    [
        (("add", "   "), None, "empty"),
        (("add",), b"\xff\xfe not utf-8", "UTF-8"),
        (("add", "x" * 100_001), None, "over the limit"),
        (("add", "fine", "--event-time", "yesterday-ish"), None, "--event-time"),
        (("add", "fine", "--priority", "7"), None, "priority"),
        (("add", "fine", "--id", "  "), None, "id"),
        (("search", ""), None, "query"),
        (("search", "x", "--limit", "0"), None, "limit"),
        (("search", "x", "--since", "last tuesday"), None, "--since"),
        (("search", "x", "--type", "opinion"), None, "opinion"),
        (("search", "x", "--context", "0"), None, "max_tokens"),
    ],
)
def test_bad_input_exits_2_and_changes_nothing(
    run: Run, db: Path, args: tuple[str, ...], stdin: bytes | None, needle: str
) -> None:
    ok(run("--json", "add", "an existing memory"))
    before = db.read_bytes()
    message = failed(run(*args, input=stdin), 2)
    assert needle in message
    assert ok(run("--json", "status"))["store"]["memories"] == 1
    assert len(db.read_bytes()) == len(before)


def test_usage_errors_exit_2(run: Run) -> None:
    assert run("add", "x", "--type", "opinion").exit_code == 2
    assert run("no-such-command").exit_code == 2
    assert run("search").exit_code == 2


def test_unknown_ids_exit_3_and_forget_nothing(run: Run) -> None:
    kept = ok(run("--json", "add", "keep me"))["id"]
    assert "nope" in failed(run("get", "nope"), 3)
    failed(run("forget", kept, "nope"), 3)
    failed(run("forget", "--hard", kept, "nope"), 3)
    assert ok(run("--json", "get", kept))["forgotten_at"] is None


def test_supersede(run: Run) -> None:
    old = ok(run("--json", "add", "standup at 9:30"))["id"]
    new = ok(run("--json", "add", "standup moved to 10:00"))["id"]
    assert ok(run("--json", "supersede", old, "--by", new))["superseded_by"] == new
    shown = run("supersede", old, "--until", "2026-05-01")
    assert shown.exit_code == 0 and f"superseded by {new}" in shown.output
    assert ok(run("--json", "supersede", old, "--clear"))["superseded_by"] is None
    failed(run("supersede", old), 2)
    failed(run("supersede", old, "--until", "soon"), 2)
    failed(run("supersede", "nope", "--by", new), 3)


def test_forget_soft_and_hard(run: Run) -> None:
    ids = [ok(run("--json", "add", f"memory number {i}"))["id"] for i in range(3)]
    assert run("forget", ids[0]).stdout.strip() == "forgot 1 memory"
    assert ok(run("--json", "forget", "--hard", ids[1], ids[2])) == {"forgotten": 2, "hard": True}
    assert [m["id"] for m in ok(run("--json", "list", "--include-forgotten"))] == [ids[0]]
    assert ok(run("--json", "list")) == []
    hits = ok(run("--json", "search", "memory number"))["hits"]
    assert hits == []


def test_search_outputs(run: Run) -> None:
    target = ok(run("--json", "add", "The billing deploy broke; pinning psycopg fixed it",
                    "--tag", "deploy"))["id"]  # fmt: skip
    ok(run("--json", "add", "Lunch was a sandwich with cheese"))
    result = ok(run("--json", "search", "psycopg deploy", "--explain"))
    assert result["query"] == "psycopg deploy"
    assert result["hits"][0]["memory"]["id"] == target
    trace = result["hits"][0]["trace"]
    assert {c["channel"] for c in trace["channels"]} >= {"bm25"}
    assert trace["final_score"] == pytest.approx(result["hits"][0]["score"])
    tagged = ok(run("--json", "search", "lunch", "--tag", "deploy"))["hits"]
    assert [h["memory"]["id"] for h in tagged] in ([], [target])
    human = run("search", "psycopg deploy", "--explain")
    assert human.exit_code == 0 and "psycopg" in human.stdout
    # The explanation shows the channels and the same score the JSON carries.
    assert "bm25" in human.stdout and f"{result['hits'][0]['score']:.4f}" in human.stdout
    context = run("search", "psycopg deploy", "--context", "50")
    assert context.stdout.startswith("[Memory Context]") and "psycopg" in context.stdout
    as_json = ok(run("--json", "search", "psycopg deploy", "--context", "50"))
    assert as_json["budget"] == 50 and as_json["tokens"] <= 50


def test_explain_header_shows_the_window_an_event_gave(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Anchors to events are off by default; the header shows one where a search uses them.
    from recalld.config import Settings
    from recalld.interfaces.render import print_search
    from recalld.providers.embedders import FakeEmbedder
    from recalld.retrieval.config import BALANCED

    settings = Settings.model_construct(db=tmp_path / "a.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        moved = engine.add("I moved to Lisbon", event_time=datetime(2024, 3, 10, tzinfo=UTC)).id
        engine.add("I adopted a cat named Miso", event_time=datetime(2024, 1, 5, tzinfo=UTC))
        result = engine.search("what pet did I get before I moved to Lisbon?", explain=True,
                               config=BALANCED.with_changes(anchor_events=True))  # fmt: skip
    print_search(result, explain=True)
    header = " ".join(capsys.readouterr().out.split("#1")[0].split())
    assert "time window before 2024-03-10" in header
    assert f"before 'I moved to Lisbon', dated by {moved}" in header


def test_explain_header_says_when_a_query_asks_for_advice(run: Run) -> None:
    ok(run("--json", "add", "I grow tomatoes and basil in my garden"))
    asked = " ".join(run("search", "any tips for my garden?", "--explain").stdout.split())
    assert "preference query, asks for advice" in asked
    told = " ".join(run("search", "what do I grow in my garden?", "--explain").stdout.split())
    assert "asks for advice" not in told


def test_import_reports_skipped_lines_and_duplicates(run: Run, tmp_path: Path) -> None:
    source = tmp_path / "memories.jsonl"
    source.write_text(
        '{"content": "first imported memory", "tags": ["a"]}\n'
        "not json at all\n"
        "\n"
        '{"content": "second imported memory", "event_time": "2024-05-01T10:00:00"}\n'
        '{"text": "wrong field name"}\n'
        '["an", "array"]\n'
        '{"content": "first imported memory", "tags": ["a"]}\n',
        encoding="utf-8",
    )
    result = run("--json", "import", str(source))
    assert json.loads(result.stdout) == {"read": 3, "stored": 2, "duplicates": 1,
                                         "skipped_lines": 3}  # fmt: skip
    assert result.exit_code == EXIT_SKIPPED_LINES == 7
    assert [line.split(" at ")[0].split(":")[0] for line in result.stderr.splitlines()] == [
        "created a new store", "warning", "warning", "warning"]  # fmt: skip
    assert "skipped line 2: " in result.stderr and "line 5" in result.stderr
    assert "line 6" in result.stderr
    again = run("--json", "import", str(source))
    assert again.exit_code == 7
    assert json.loads(again.stdout)["stored"] == 0 and json.loads(again.stdout)["duplicates"] == 3
    human = run("import", str(source))
    assert human.stdout.strip() == "read: 3, stored: 0, duplicates: 3, skipped lines: 3"
    clean = tmp_path / "clean.jsonl"
    clean.write_text('{"content": "a clean file"}\n', encoding="utf-8")
    assert run("import", str(clean)).exit_code == 0


def test_import_from_stdin_and_bad_files(run: Run, tmp_path: Path) -> None:
    lines = "\n".join(json.dumps({"content": f"piped memory {i}"}) for i in range(5))
    assert ok(run("--json", "import", "-", input=lines))["stored"] == 5
    assert "cannot read" in failed(run("import", str(tmp_path / "missing.jsonl")), 2)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("nothing here is json\n{also not\n", encoding="utf-8")
    assert run("import", str(garbage)).exit_code == 2
    # Blank content is a bad line like any other: reported by number, skipped, the rest kept;
    # --strict refuses the whole file and stores nothing.
    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"content": "kept beside a blank one"}\n{"content": "   "}\n'
                     '{"content": "also kept"}\n', encoding="utf-8")  # fmt: skip
    strict = run("import", "--strict", str(blank))
    assert strict.exit_code == 2
    assert strict.stderr.splitlines()[0].startswith("bad line 2: content is empty")
    assert "nothing imported: 1 bad line(s) (--strict" in strict.stderr
    assert len(ok(run("--json", "list", "-n", "100"))) == 5
    skipped = run("--json", "import", str(blank))
    assert skipped.exit_code == 7 and json.loads(skipped.stdout)["stored"] == 2
    assert "warning: skipped line 2: content is empty" in skipped.stderr
    assert len(ok(run("--json", "list", "-n", "100"))) == 7
    # Invalid UTF-8 is reported by line; the other lines are imported.
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(
        b'{"content": "before the bad byte"}\n{"content": "caf\xe9"}\n{"content": "after it"}\n'
    )
    result = run("--json", "import", str(mixed))
    assert result.exit_code == 7
    assert json.loads(result.stdout)["stored"] == 2
    assert result.stderr.startswith("warning: skipped line 2: not valid UTF-8")
    # Wrongly typed fields are reported by line too.
    typed = tmp_path / "typed.jsonl"
    typed.write_text(
        '{"content": "tags as text", "tags": "deploy"}\n'
        '{"content": "time as number", "event_time": 1700000000}\n'
        '{"content": "a good one", "tags": ["deploy"]}\n',
        encoding="utf-8",
    )
    result = run("--json", "import", str(typed))
    assert json.loads(result.stdout)["stored"] == 1
    assert "line 1: 'tags' must be a list of strings" in result.stderr
    assert "line 2: 'event_time'" in result.stderr


def test_status_and_reindex(run: Run) -> None:
    for i in range(3):
        ok(run("--json", "add", f"status memory {i} about gardening"))
    status = ok(run("--json", "status"))
    assert status["store"]["memories"] == 3 and status["store"]["with_vectors"] == 3
    assert json.loads(status["store"]["fingerprint"])["dimension"] == 64
    human = run("status")
    assert human.exit_code == 0 and "memories" in human.stdout
    mismatch = failed(run("search", "gardening", embedder="fake:32"), 5)
    assert "reindex" in mismatch
    failed(run("add", "new one", embedder="fake:32"), 5)
    assert ok(run("--json", "reindex", "--yes", embedder="fake:32")) == {"reindexed": 3}
    hits = ok(run("--json", "search", "gardening memory 2", embedder="fake:32"))["hits"]
    assert len(hits) == 3 and hits[0]["memory"]["content"] == "status memory 2 about gardening"
    status = ok(run("--json", "status", embedder="fake:32"))
    assert json.loads(status["store"]["fingerprint"])["dimension"] == 32
    assert run("reindex", "--yes", embedder="fake:32").stdout.strip() == "re-embedded 3 memories"


def test_store_problems_exit_4(run: Run, db: Path) -> None:
    db.write_bytes(b"definitely not a database " * 100)
    assert "not a usable recalld store" in failed(run("status"), 4)
    db.unlink()
    foreign = sqlite3.connect(db)
    foreign.execute("CREATE TABLE notes (body TEXT)")
    foreign.commit()
    foreign.close()
    before = db.read_bytes()
    assert "another program" in failed(run("add", "hello"), 4)
    assert db.read_bytes() == before


def test_embedder_failure_exits_6(run: Run, tmp_path: Path) -> None:
    empty = tmp_path / "no-model"
    empty.mkdir()
    ok(run("--json", "add", "stored with the fake embedder"))
    assert "model file not found" in failed(run("add", "x", embedder=f"onnx:{empty}"), 6)
    assert len(ok(run("--json", "list"))) == 1
    assert run("add", "x", embedder="word2vec").exit_code == 2


def test_missing_config_file_exits_2(run: Run, tmp_path: Path) -> None:
    assert "config file" in failed(run("--config", str(tmp_path / "nope.toml"), "status"), 2)


def test_version_and_help(run: Run) -> None:
    assert recalld.__version__ in run("--version").stdout
    help_text = run("--help").stdout
    for command in ("add", "search", "get", "list", "forget", "import", "status", "reindex"):
        assert command in help_text
        sub = run(command, "--help")
        assert sub.exit_code == 0 and sub.stdout.startswith("Usage:")
