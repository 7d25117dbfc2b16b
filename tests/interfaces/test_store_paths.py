"""Stores are found, never invented: paths are expanded, read commands refuse a missing store."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from recalld.config import load_settings

Run = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.integration


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def run(tmp_path: Path, home: Path, cli_env: dict[str, str], recalld_command: list[str]) -> Run:
    workdir = tmp_path / "work"
    workdir.mkdir()

    def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*recalld_command, "--embedder", "fake", *args], cwd=workdir, text=True,
            env={**cli_env, "HOME": str(home), **env}, capture_output=True, timeout=120,
        )  # fmt: skip

    return _run


READ_COMMANDS = [
    ["status"],
    ["search", "anything"],
    ["search", "anything", "--context", "200"],
    ["list"],
    ["get", "some-id"],
    ["forget", "some-id"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a))
def test_read_commands_refuse_a_missing_store(run: Run, tmp_path: Path,
                                              args: list[str]) -> None:  # fmt: skip
    missing = tmp_path / "typo" / "memroy.db"
    done = run("--db", str(missing), *args)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"no store at {missing}" in lines[0]
    assert "recalld add" in lines[0]
    assert not missing.exists() and not missing.parent.exists()


def test_mcp_refuses_a_missing_store_unless_told_to_create(run: Run, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    done = run("mcp", RECALLD_DB=str(missing))
    assert done.returncode == 4
    assert f"no store at {missing}" in done.stderr and "--create" in done.stderr
    assert not missing.exists()


def test_a_tilde_in_recalld_db_means_home_as_an_mcp_client_writes_it(
    run: Run, home: Path, tmp_path: Path
) -> None:
    """`.mcp.json` passes RECALLD_DB='~/...' unexpanded: it must not make a folder named ~."""
    first = run("add", "written through a tilde path", RECALLD_DB="~/memories/x.db")
    assert first.returncode == 0, first.stderr
    assert (home / "memories" / "x.db").is_file()
    assert f"created a new store at {home / 'memories' / 'x.db'}" in first.stderr
    assert not (tmp_path / "work" / "~").exists()
    again = run("add", "a second memory", RECALLD_DB="$HOME/memories/x.db")
    assert again.returncode == 0 and "created" not in again.stderr
    status = run("--json", "status", RECALLD_DB="${HOME}/memories/x.db")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["store"]["memories"] == 2


def test_a_tilde_in_the_db_flag_is_expanded(run: Run, home: Path) -> None:
    assert run("--db", "~/flag.db", "add", "via the flag").returncode == 0
    assert (home / "flag.db").is_file()
    listed = run("--json", "--db", "~/flag.db", "list")
    assert [m["content"] for m in json.loads(listed.stdout)] == ["via the flag"]


def test_config_file_and_cache_paths_are_expanded(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('db = "~/from-file.db"\ncache_dir = "$CACHE_ROOT/recalld"\n',
                      encoding="utf-8")  # fmt: skip
    environ = {"HOME": "/home/someone", "CACHE_ROOT": "/var/cache", "RECALLD_CONFIG": "~/c.toml"}
    settings = load_settings(config_file=config, environ=environ)
    assert settings.db == Path("/home/someone/from-file.db")
    assert settings.cache_dir == Path("/var/cache/recalld")
    named = load_settings(
        environ={**environ, "HOME": str(tmp_path), "RECALLD_CONFIG": "~/config.toml"}
    )
    assert named.db == Path(str(tmp_path)) / "from-file.db"
