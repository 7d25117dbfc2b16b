"""Helpers shared by the sources tests: a generated memory workspace, store snapshots."""

from __future__ import annotations

from pathlib import Path

import recalld

DAILY = """# {day}

## Morning

Standup with the platform team about the {topic} rollout.
- decided: ship behind a flag
- owner: {owner}

## Afternoon

Paired with {owner} on the {topic} migration script.
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def make_workspace(root: Path, days: int = 4) -> Path:
    """A small memory workspace: MEMORY.md, dated daily notes, an undated topic note."""
    write(root / "MEMORY.md", "# Long-term memory\n\n- I prefer green tea to coffee.\n"
          "- My sister Maya lives in Lisbon.\n")  # fmt: skip
    topics = ["search", "billing", "auth", "export", "sync", "backup"]
    owners = ["Alice", "Bob", "Chen", "Dana", "Eve", "Farid"]
    for i in range(days):
        day = f"2026-03-{10 + i:02d}"
        write(root / "memory" / f"{day}.md",
              DAILY.format(day=day, topic=topics[i % 6], owner=owners[i % 6]))  # fmt: skip
    write(root / "memory" / "projects" / "recalld.md",
          "# recalld\n\nA memory engine for agents. Uses SQLite FTS5 and vectors.\n")  # fmt: skip
    return root


def chunk_state(
    engine: recalld.MemoryEngine,
) -> set[tuple[str | None, int | None, int | None, str]]:
    """Every live chunk as (path, first line, last line, content)."""
    chunks = engine.list(types=["chunk"], limit=100_000)
    return {(m.source.path, m.source.line_start, m.source.line_end, m.content) for m in chunks}
