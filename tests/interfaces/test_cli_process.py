"""The installed ``recalld`` entry point in real processes: the done-criterion and exit codes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures"
Run = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.integration


@pytest.fixture
def run(tmp_path: Path, cli_env: dict[str, str], recalld_command: list[str]) -> Run:
    env = {**cli_env, "RECALLD_DB": str(tmp_path / "memory.db")}

    def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*recalld_command, *args], input=stdin, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    return _run


def test_add_then_search_finds_it_first(run: Run) -> None:
    """The facade's done-criterion, with the packaged model, through the real entry point."""
    imported = run("--json", "import", str(FIXTURES / "distractors.jsonl"))
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["stored"] >= 15
    added = run(
        "--json", "add", "Pinning psycopg to 3.2 fixed the broken billing deploy on Friday."
    )
    assert added.returncode == 0, added.stderr
    memory_id = json.loads(added.stdout)["id"]
    for query in ("how did we repair the payments release that failed?", "psycopg"):
        found = run("--json", "search", query, "--limit", "3")
        assert found.returncode == 0, found.stderr
        hits = json.loads(found.stdout)["hits"]
        assert hits[0]["memory"]["id"] == memory_id, (query, [h["memory"]["content"] for h in hits])
    human = run("search", "psycopg", "--limit", "1")
    assert human.returncode == 0 and memory_id in human.stdout


def test_exit_codes_seen_by_a_shell(run: Run, tmp_path: Path) -> None:
    stored = run("--embedder", "fake", "add", "a memory for the exit code test")
    assert stored.returncode == 0 and stored.stdout.startswith("stored ")
    cases = [
        (2, ["--embedder", "fake", "add", "   "], "content is empty"),
        (3, ["--embedder", "fake", "get", "no-such-id"], "no memory has id 'no-such-id'"),
        (5, ["--embedder", "fake:8", "search", "memory"], "recalld reindex"),
        (6, ["--embedder", f"onnx:{tmp_path}", "add", "x"], "model file not found"),
    ]
    for code, args, message in cases:
        done = run(*args)
        assert done.returncode == code, (args, done.stderr)
        assert done.stderr == f"error: {done.stderr[7:]}" and message in done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    foreign = tmp_path / "foreign.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    done = run("--db", str(foreign), "--embedder", "fake", "status")
    assert done.returncode == 4 and "another program" in done.stderr
    listed = json.loads(run("--embedder", "fake", "--json", "list").stdout)
    assert [m["content"] for m in listed] == ["a memory for the exit code test"]


def test_lifecycle_json(run: Run, tmp_path: Path) -> None:
    fake = ("--embedder", "fake", "--json")
    first = json.loads(run(*fake, "add", "-", stdin="the spare key is under the blue pot").stdout)
    source = tmp_path / "more.jsonl"
    source.write_text(
        '{"content": "the wifi password is on the fridge", "tags": ["home"]}\n', encoding="utf-8"
    )
    assert json.loads(run(*fake, "import", str(source)).stdout)["stored"] == 1
    assert json.loads(run(*fake, "get", first["id"]).stdout)["content"].startswith("the spare")
    assert len(json.loads(run(*fake, "list").stdout)) == 2
    hits = json.loads(run(*fake, "search", "spare key pot").stdout)["hits"]
    assert hits[0]["memory"]["id"] == first["id"]
    assert json.loads(run(*fake, "forget", first["id"]).stdout) == {"forgotten": 1, "hard": False}
    status = json.loads(run(*fake, "status").stdout)
    assert (status["store"]["memories"], status["store"]["forgotten"]) == (1, 1)
    reindexed = run("--embedder", "fake:16", "--json", "reindex", "--yes")
    assert json.loads(reindexed.stdout) == {"reindexed": 2}
    hits = json.loads(run("--embedder", "fake:16", "--json", "search", "wifi password").stdout)
    assert [h["memory"]["content"] for h in hits["hits"]] == ["the wifi password is on the fridge"]
