"""A small markdown folder for the tests of collections and ``get``: three pages in two
sub-folders, each with a heading, one with a sub-heading."""

from __future__ import annotations

from pathlib import Path

AUTH = "# Auth\n\nTokens expire after one hour.\n\n## Refresh\n\nCall the refresh endpoint.\n"
INSTALL = "# Install\n\nRun make install to set up the editor.\n"
THEMES = "# Themes\n\nPick a colour theme with the theme command.\n"
PAGES = {"api/auth.md": AUTH, "guide/install.md": INSTALL, "guide/themes.md": THEMES}
"""Each page's path inside the folder, and its text."""


def docs_folder(base: Path) -> Path:
    """``base/docs`` with :data:`PAGES` written in it."""
    folder = base / "docs"
    for path, text in PAGES.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    return folder
