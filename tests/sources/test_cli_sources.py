from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sources_helpers import write

from recalld.interfaces.cli import cli

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sources"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RECALLD_EMBEDDER", "fake")
    monkeypatch.setenv("RECALLD_CACHE_DIR", str(tmp_path / "cache"))
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")
    monkeypatch.setenv("RECALLD_CONFIG", str(config))
    db = str(tmp_path / "cli.db")

    def invoke(*args: str, input: bytes | None = None):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(cli, ["--db", db, *args], input=input)

    return invoke


def test_index_status_search_workflow(run, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    result = run("index", str(workspace))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("indexed 6 file(s)")
    again = run("--json", "index", str(workspace))
    report = json.loads(again.stdout)
    assert report["indexed"] == [] and report["unchanged"] == 6 and not report["empty"]
    status = run("status")
    assert "indexed files: 6 of 6 tracked" in status.output
    assert "run `recalld index`" not in status.output
    (workspace / "MEMORY.md").write_text("# Long-term memory\n\n- I now drink rooibos.\n")
    stale = run("status")
    assert "1 file(s) changed on disk since indexed" in stale.output
    assert "run `recalld index` to bring the index up to date" in stale.output
    assert run("index").exit_code == 0  # no PATH: the known workspace
    found = json.loads(run("--json", "search", "rooibos").stdout)["hits"][0]["memory"]
    assert found["source"] == {"kind": "file", "path": str(workspace / "MEMORY.md"),
                               "line_start": 1, "line_end": 3, "ref": None}  # fmt: skip
    assert "rooibos" in found["content"]


def test_index_that_finds_nothing_fails_loudly(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / "notes" / "idea.md", "An idea.\n")
    result = run("index", str(tmp_path / "notes"))
    assert result.exit_code == 2
    assert "nothing to index" in result.stderr and "--glob '**/*.md'" in result.stderr
    missing = run("index", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and "no such file or folder" in missing.stderr
    bad = run("index", str(tmp_path / "notes"), "--glob", "../*.md")
    assert bad.exit_code == 2 and "must be relative" in bad.stderr


def test_index_where_every_file_is_broken_exits_2(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "MEMORY.md").write_bytes(b"\x00\x01")
    result = run("index", str(tmp_path / "ws"))
    assert result.exit_code == 2
    assert "binary file" in result.stderr and "nothing here is searchable" in result.stderr
    status = run("status")
    assert "the file index is EMPTY" in status.output
    assert "not indexed:" in status.output


def test_import_transcript_formats(run) -> None:  # type: ignore[no-untyped-def]
    strict = run("import", "--strict", "--format", "jsonl-transcript",
                 str(FIXTURES / "transcript.jsonl"))  # fmt: skip
    assert strict.exit_code == 2 and "bad line 4: not valid JSON" in strict.stderr
    assert "nothing imported: 2 bad line(s) (--strict" in strict.stderr
    result = run("import", "--format", "jsonl-transcript", str(FIXTURES / "transcript.jsonl"))
    assert result.exit_code == 7  # stored, but lines were skipped: the same policy as memories
    assert "turns read: 7, stored: 7, already present: 0, skipped lines: 2" in result.stdout
    assert "warning: skipped line 4: not valid JSON" in result.stderr
    again = run("--json", "import", "--format", "jsonl-transcript",
                str(FIXTURES / "transcript.jsonl"))  # fmt: skip
    assert json.loads(again.stdout)["stored"] == 0
    piped = run("import", "--format", "claude-code", "-",
                input=(FIXTURES / "claude_code_session.jsonl").read_bytes())  # fmt: skip
    assert piped.exit_code == 0 and "stored: 3" in piped.stdout
    for fmt, name in [("longmemeval", "longmemeval_mini.json"), ("locomo", "locomo_mini.json")]:
        assert run("import", "--format", fmt, str(FIXTURES / name)).exit_code == 0


def test_search_shows_who_said_an_imported_turn(run) -> None:  # type: ignore[no-untyped-def]
    assert run("import", "--format", "jsonl-transcript",
               str(FIXTURES / "transcript.jsonl")).exit_code == 7  # fmt: skip
    result = run("search", "salmon kibble", "--limit", "1")
    assert result.exit_code == 0
    # the content is what was said; the role is shown beside it, from metadata
    assert "user" in result.stdout and "user:" not in result.stdout
    explained = run("search", "salmon kibble", "--limit", "1", "--explain")
    header = explained.stdout.split("    Miso only eats")[0]
    assert "session s1" in header and header.split()[-1] == "user"
    assert "    Miso only eats salmon kibble." in explained.stdout


def test_import_of_unusable_transcript(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    result = run("import", "--format", "claude-code", str(bad))
    assert result.exit_code == 2 and "nothing imported" in result.stderr


def test_undated_transcript_is_flagged(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.jsonl"
    path.write_text('{"role": "user", "content": "no time here"}\n')
    result = run("import", "--format", "jsonl-transcript", str(path))
    assert result.exit_code == 0 and "1 of 1 turns have no timestamp" in result.stderr


def test_watch_command_bounded(run, workspace: Path) -> None:  # type: ignore[no-untyped-def]
    result = run("watch", str(workspace), "--max-seconds", "0.3", "--interval", "0.1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("indexed 6 file(s)")
    assert "stopped watching after 1 index run(s)" in result.stderr


def test_help_lists_the_source_commands(run) -> None:  # type: ignore[no-untyped-def]
    top = run("--help").output
    assert "index" in top and "watch" in top
    assert "--glob" in run("index", "--help").output
    assert "--max-seconds" in run("watch", "--help").output
    assert "claude-code" in run("import", "--help").output
