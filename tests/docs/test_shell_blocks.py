"""Every shell block of the user docs runs, in order, on a temporary store.

A block that cannot run here says so on the line before it, with the reason:
``<!-- not run: needs the Claude Code command (claude) -->``. Blocks of one page share a
store and a working folder, as a reader following the page would.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "README.md",
    "docs/getting-started.md",
    "docs/cli.md",
    "docs/http.md",
    "docs/mcp.md",
    "docs/postgres.md",
    "docs/backup.md",
]
SKIP = re.compile(r"<!-- not run: (?P<why>[^>]*\S)\s*-->")

pytestmark = pytest.mark.integration


def shell_blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, why it is not run or None) of each ```bash block of ``page``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, str | None]] = []
    for number, line in enumerate(lines):
        if line.strip() != "```bash":
            continue
        end = lines.index("```", number + 1)
        marker = SKIP.search(lines[number - 1]) if number else None
        found.append((number + 1, "\n".join(lines[number + 1 : end]),
                      marker.group("why") if marker else None))  # fmt: skip
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_shell_block_runs(page: str, tmp_path: Path, cli_env: dict[str, str],
                                recalld_command: list[str]) -> None:  # fmt: skip
    work, home, runtime = tmp_path / "work", tmp_path / "home", tmp_path / "runtime"
    for folder in (work, home, runtime):
        folder.mkdir(mode=0o700)
    path = f"{Path(recalld_command[0]).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**cli_env, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime), "PATH": path,
           "RECALLD_DB": str(tmp_path / "memory.db"), "RECALLD_EMBEDDER": "fake"}  # fmt: skip
    ran = 0
    for line, code, why in shell_blocks(ROOT / page):
        if why is not None:
            continue
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, f"{page}:{line}\n{code}\n{done.stdout}\n{done.stderr}"
        ran += 1
    assert ran or page not in ("docs/getting-started.md", "docs/cli.md"), f"{page}: none ran"


def test_blocks_left_out_say_why() -> None:
    skipped = [(page, line, why) for page in PAGES
               for line, _, why in shell_blocks(ROOT / page) if why is not None]  # fmt: skip
    assert skipped  # the marker is recognised at all
    for page, line, why in skipped:
        assert len(why.split()) >= 2, f"{page}:{line}: say why the block is not run"


def test_the_parser_sees_a_marked_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- not run: needs a network -->\n```bash\ncurl x\n```\n\n"
                    "```bash\necho hi\n```\n", encoding="utf-8")  # fmt: skip
    assert shell_blocks(page) == [(3, "curl x", "needs a network"), (7, "echo hi", None)]
