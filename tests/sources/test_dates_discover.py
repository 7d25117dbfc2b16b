from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from recalld.sources.dates import date_from_path, event_time_for
from recalld.sources.discover import (
    DEFAULT_GLOBS,
    check_globs,
    glob_regex,
    normalize_root,
    scan_root,
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("memory/2026-03-14.md", date(2026, 3, 14)),
        ("memory/2026_03_14.md", date(2026, 3, 14)),
        ("memory/2026.03.14.md", date(2026, 3, 14)),
        ("memory/20260314.md", date(2026, 3, 14)),
        ("memory/2026-03-14-notes.md", date(2026, 3, 14)),
        ("memory/standup-2026-03-14.md", date(2026, 3, 14)),
        ("memory/2026/03/14.md", date(2026, 3, 14)),
        ("memory/2024-02-29.md", date(2024, 2, 29)),
        ("MEMORY.md", None),
        ("memory/projects.md", None),
        ("memory/2026-13-01.md", None),  # no month 13
        ("memory/2023-02-29.md", None),  # not a leap year
        ("memory/2026-03_14.md", None),  # mixed separators
        ("memory/ticket-123202603141.md", None),  # digits run on: an id, not a date
        ("memory/10000101.md", None),  # year out of range
        ("memory/2026/3/14.md", None),
    ],
)
def test_dates_from_file_names(name: str, expected: date | None) -> None:
    assert date_from_path(name) == expected


def test_event_time_is_utc_midnight() -> None:
    assert event_time_for("memory/2026-03-14.md") == datetime(2026, 3, 14, tzinfo=UTC)
    assert event_time_for("MEMORY.md") is None


def test_glob_regex_semantics() -> None:
    deep = glob_regex("memory/**/*.md")
    assert deep.match("memory/a.md") and deep.match("memory/x/y/a.md")
    assert not deep.match("memory/a.txt") and not deep.match("other/a.md")
    top = glob_regex("*.md")
    assert top.match("a.md") and not top.match("x/a.md")
    assert glob_regex("notes/[!_]*.md").match("notes/a.md")
    assert not glob_regex("notes/[!_]*.md").match("notes/_draft.md")


def test_bad_globs_are_refused() -> None:
    for bad in [("/etc/*.md",), ("../x/*.md",), ("",), ()]:
        with pytest.raises(ValueError):
            check_globs(bad)


def _touch(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_scan_finds_workspace_files_only(tmp_path: Path) -> None:
    _touch(tmp_path / "MEMORY.md")
    _touch(tmp_path / "memory" / "2026-01-01.md")
    _touch(tmp_path / "memory" / "deep" / "er" / "note.md")
    _touch(tmp_path / "memory" / "image.png")
    _touch(tmp_path / "README.md")
    _touch(tmp_path / "memory" / ".git" / "x.md")
    scan = scan_root(str(tmp_path), DEFAULT_GLOBS)
    rel = sorted(os.path.relpath(f.path, tmp_path) for f in scan.files)
    assert rel == ["MEMORY.md", "memory/2026-01-01.md", "memory/deep/er/note.md"]
    assert scan.problems == () and not scan.missing
    assert all(f.root == str(tmp_path) and f.size == 1 for f in scan.files)


def test_scan_survives_symlink_loops_and_broken_links(tmp_path: Path) -> None:
    _touch(tmp_path / "memory" / "a.md")
    os.symlink(tmp_path / "memory", tmp_path / "memory" / "loop")
    os.symlink(tmp_path / "nowhere.md", tmp_path / "memory" / "broken.md")
    os.symlink(tmp_path / "memory" / "a.md", tmp_path / "memory" / "alias.md")
    scan = scan_root(str(tmp_path), DEFAULT_GLOBS)
    assert [os.path.basename(f.path) for f in scan.files] == ["a.md"]  # the alias is the same file
    messages = {os.path.basename(p.path): p.message for p in scan.problems}
    assert messages["loop"].startswith("symbolic link loop")
    assert messages["broken.md"] == "broken symbolic link"


def test_scan_reports_fifo_and_unreadable_folder(tmp_path: Path) -> None:
    _touch(tmp_path / "memory" / "ok.md")
    os.mkfifo(tmp_path / "memory" / "pipe.md")
    scan = scan_root(str(tmp_path), DEFAULT_GLOBS)
    assert [p.message for p in scan.problems] == ["not a regular file"]
    assert len(scan.files) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_scan_reports_unreadable_folder(tmp_path: Path) -> None:
    locked = tmp_path / "memory" / "locked"
    _touch(locked / "x.md")
    locked.chmod(0)
    try:
        scan = scan_root(str(tmp_path), DEFAULT_GLOBS)
    finally:
        locked.chmod(0o755)
    assert any("cannot list folder" in p.message for p in scan.problems)


def test_scan_of_a_file_or_missing_path(tmp_path: Path) -> None:
    _touch(tmp_path / "single.md")
    scan = scan_root(str(tmp_path / "single.md"), DEFAULT_GLOBS)
    assert [f.path for f in scan.files] == [str(tmp_path / "single.md")]
    gone = scan_root(str(tmp_path / "gone"), DEFAULT_GLOBS)
    assert gone.missing and gone.problems[0].message == "no such file or folder"


def test_normalize_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert normalize_root("a/../b/") == str(tmp_path / "b")


def test_read_text_refuses_what_is_not_a_readable_text_file(tmp_path: Path) -> None:
    from recalld.sources.reading import SourceReadError, read_text

    with pytest.raises(SourceReadError, match="not a regular file"):
        read_text(str(tmp_path))
    with pytest.raises(SourceReadError, match="cannot read: No such file or directory"):
        read_text(str(tmp_path / "vanished.md"))
    bom = tmp_path / "bom.md"
    bom.write_bytes("\ufeff# Títle\r\nline\r\n".encode())
    text = read_text(str(bom))
    assert text.text == "# Títle\r\nline\r\n" and text.size == len(bom.read_bytes())


def test_a_file_swapped_for_a_fifo_after_its_stat_is_refused_without_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is a regular one when stat'ed and a FIFO (no writer) when opened: a blocking
    open would wait for a writer forever; the read refuses it at once."""
    import threading

    from recalld.sources.reading import SourceReadError, read_text

    note = tmp_path / "note.md"
    note.write_text("a note\n")
    real_stat = os.stat
    swapped: list[bool] = []

    def stat_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        info = real_stat(path, *args, **kwargs)
        if os.fspath(path) == str(note) and not swapped:
            swapped.append(True)
            note.unlink()
            os.mkfifo(note)  # what another process does between the stat and the open
        return info

    monkeypatch.setattr(os, "stat", stat_then_swap)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_text(str(note))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (reported to the test thread)
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=5)
    monkeypatch.undo()
    if reader.is_alive():  # release the blocked open (a writer appears), then fail
        os.close(os.open(note, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=5)
        pytest.fail("reading a file swapped for a FIFO hung")
    assert swapped and len(outcome) == 1 and isinstance(outcome[0], SourceReadError)
    assert "not a regular file" in str(outcome[0])
