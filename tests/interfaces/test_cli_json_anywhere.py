"""``--json`` after the subcommand (``recalld search x --json``) as well as before it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from recalld.interfaces.cli import cli

FIXTURES = Path(__file__).parent.parent / "fixtures"


def every_command() -> Iterator[tuple[str, click.Command]]:
    """Each command and subcommand, the lazily imported ones included, by its full name."""
    ctx = click.Context(cli)

    def walk(group: click.Group, prefix: str) -> Iterator[tuple[str, click.Command]]:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            yield f"{prefix}{name}", command
            if isinstance(command, click.Group):
                yield from walk(command, f"{prefix}{name} ")

    yield from walk(cli, "")


def test_every_command_takes_json_after_its_name() -> None:
    names = []
    for name, command in every_command():
        options = [p for p in command.params if "--json" in getattr(p, "opts", ())]
        assert len(options) == 1, name
        names.append(name)
        if not name.startswith("bench"):  # bench's --json names its report file
            assert getattr(options[0], "is_flag", False), name
    assert {"add", "search", "get", "list", "forget", "status", "mcp", "index"} <= set(names)


@pytest.fixture
def run(tmp_path: Path, cli_env: dict[str, str]) -> Any:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    env.update({k: v for k, v in cli_env.items() if k.startswith("RECALLD_")})
    base = ["--db", str(tmp_path / "cli.db"), "--embedder", "fake"]

    def _run(*args: str) -> Any:
        done = CliRunner().invoke(cli, [*base, *args], env=env, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)

    return _run


def test_json_after_the_subcommand_is_the_same_output(run: Any) -> None:
    added = run("add", "The deploy key is in the vault", "--tag", "ops", "--json")
    assert run("--json", "add", "The deploy key is in the vault")["duplicate_of"] == added["id"]
    other = run("add", "Lunch was soup", "--json")["id"]
    query = ("search", "deploy key", "--as-of", "2026-01-01")
    after, before = run(*query, "--explain", "--json"), run("--json", *query, "--explain")
    assert after["hits"] and [h["memory"]["id"] for h in after["hits"]] == [
        h["memory"]["id"] for h in before["hits"]]  # fmt: skip
    assert [h["score"] for h in after["hits"]] == [h["score"] for h in before["hits"]]
    assert run(*query, "--context", "50", "--json")["budget"] == 50
    assert run("get", added["id"], "--json")["content"] == "The deploy key is in the vault"
    assert {m["id"] for m in run("list", "--json")} == {added["id"], other}
    assert run("supersede", other, "--by", added["id"], "--json")["superseded_by"] == added["id"]
    assert run("forget", other, "--json") == {"forgotten": 1, "hard": False}
    assert run("import", str(FIXTURES / "distractors.jsonl"), "--json")["stored"] == 16
    assert run("status", "--json")["store"]["memories"] == 17
    assert run("reindex", "--yes", "--json") == {"reindexed": 18}
