"""``recalld index`` and symbolic links: a link that leaves the workspace (to a file or a
folder) is skipped with a warning naming it, and followed only with ``--follow-symlinks``;
a link that stays inside is followed as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner
from sources_helpers import write

import recalld
from recalld.interfaces.cli import cli

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- kestrelsecret"


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\nThe harbour crane is serviced on Mondays.\n")
    write(ws / "memory" / "notes.md", "# Notes\n\nAna arrives on April 12th.\n")
    write(ws / "docs" / "inside.md", "# Inside\n\nThe quayside lamp is green.\n")
    outside = tmp_path / "home"
    write(outside / ".ssh" / "id_ed25519", SECRET + "\n")
    write(outside / "private" / "diary.md", "# Diary\n\nMy kestrelsecret diary entry.\n")
    (ws / "memory" / "key.md").symlink_to(outside / ".ssh" / "id_ed25519")
    (ws / "memory" / "private").symlink_to(outside / "private", target_is_directory=True)
    (ws / "memory" / "lamp.md").symlink_to(ws / "docs" / "inside.md")  # stays inside
    return ws


def _run(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RECALLD_")}
    done = CliRunner().invoke(cli, ["--db", str(tmp_path / "store.db"), "--embedder", "fake",
                                    *argv], env=env)  # fmt: skip
    return done.exit_code, done.stdout, done.stderr


def test_links_out_of_the_workspace_are_skipped_with_a_warning(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    code, out, err = _run(tmp_path, "index", str(ws))
    assert code == 0, err
    assert "2 problem(s)" in out
    for link in (ws / "memory" / "key.md", ws / "memory" / "private"):
        assert f"warning: {link}: symbolic link to " in err
    assert "outside the workspace: not followed" in err and "--follow-symlinks" in err
    code, out, _ = _run(tmp_path, "search", "kestrelsecret", "--json", "--mode", "hybrid")
    assert code == 0
    assert not [h for h in json.loads(out)["hits"] if "kestrelsecret" in h["memory"]["content"]]
    with recalld.open(settings=None, db=tmp_path / "store.db", embedder="fake",
                      cache_dir=None) as engine:  # fmt: skip
        indexed = {Path(f.path).name for f in engine.store.source_files()}
    assert indexed == {"MEMORY.md", "notes.md", "lamp.md"}  # the inside link is followed


def test_follow_symlinks_follows_them(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    code, out, err = _run(tmp_path, "index", str(ws), "--follow-symlinks")
    assert code == 0, err
    assert "0 problem(s)" in out and "warning" not in err
    code, out, _ = _run(tmp_path, "search", "kestrelsecret", "--json", "--mode", "hybrid")
    found = {h["memory"]["content"] for h in json.loads(out)["hits"]}
    assert any(SECRET in c for c in found) and any("diary entry" in c for c in found)
