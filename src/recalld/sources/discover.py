"""Finding a workspace's memory files: globs, a walk that survives symlink loops.

Only ``stat`` is used here (no file is read), so a scan is cheap enough to run on every
``recalld status`` and every tick of ``recalld watch``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

DEFAULT_GLOBS: tuple[str, ...] = ("MEMORY.md", "memory/**/*.md")
"""A memory workspace: the evergreen ``MEMORY.md`` and the notes under ``memory/``."""
MAX_DEPTH = 32
"""Folders deeper than this under a root are not walked (a safety net, with loop detection)."""


@dataclass(frozen=True)
class FoundFile:
    """A file a root's globs matched, as ``stat`` saw it."""

    path: str
    """Absolute, normalised, not resolved (so it reads as the user's path)."""
    root: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Problem:
    """Something that could not be indexed or read, and why."""

    path: str
    message: str


@dataclass(frozen=True)
class Scan:
    """What one root's globs match on disk."""

    root: str
    files: tuple[FoundFile, ...]
    problems: tuple[Problem, ...]
    missing: bool = False
    """The root itself does not exist (its indexed files are then left alone)."""


def normalize_root(path: str | os.PathLike[str]) -> str:
    """The absolute, normalised form of a path, as roots and files are recorded."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(path))))


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a glob over ``/``-separated relative paths (``**`` spans folders)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def check_globs(globs: tuple[str, ...]) -> None:
    """Raise ValueError for globs that cannot work (absolute, empty, or escaping the root)."""
    if not globs:
        raise ValueError("at least one glob is needed")
    for pattern in globs:
        parts = pattern.split("/")
        if not pattern or pattern.startswith("/") or ".." in parts:
            raise ValueError(f"glob {pattern!r} must be relative to the folder and stay inside it")


def _may_descend(rel_parts: list[str], globs: tuple[str, ...]) -> bool:
    """Whether a folder at ``rel_parts`` could hold a match of any glob."""
    return any(_prefix_may_match(rel_parts, g.split("/")) for g in globs)


def _prefix_may_match(rel_parts: list[str], parts: list[str]) -> bool:
    for depth, name in enumerate(rel_parts):
        if depth >= len(parts):
            return False
        part = parts[depth]
        if "**" in part:
            return True
        if depth == len(parts) - 1 or not fnmatchcase(name, part):
            return False  # the last part names files, not folders
    return True


def scan_root(root: str, globs: tuple[str, ...], follow_symlinks: bool = False) -> Scan:
    """The files under ``root`` that ``globs`` match; a file root is itself the only match.

    A symbolic link (to a file or a folder) that resolves outside ``root`` is not followed
    unless ``follow_symlinks``: it is reported as a problem instead, so that a link such as
    ``memory/key.md -> ~/.ssh/id_ed25519`` never puts a file from elsewhere in the index.
    """
    try:
        info = os.stat(root)
    except FileNotFoundError:
        return Scan(root, (), (Problem(root, "no such file or folder"),), missing=True)
    except OSError as exc:
        return Scan(root, (), (Problem(root, f"cannot read: {exc.strerror}"),), missing=True)
    if not stat.S_ISDIR(info.st_mode):
        if not stat.S_ISREG(info.st_mode):
            return Scan(root, (), (Problem(root, "not a regular file or folder"),))
        return Scan(root, (FoundFile(root, root, info.st_size, info.st_mtime_ns),), ())
    inside = None if follow_symlinks else os.path.realpath(root)
    return _walk(root, info, [glob_regex(g) for g in globs], globs, inside)


def _leaves(entry: os.DirEntry[str], inside: str | None) -> Problem | None:
    """The problem of a symbolic link that resolves outside the folder ``inside`` (None:
    links are followed, or this is no link, or it stays inside)."""
    if inside is None or not entry.is_symlink():
        return None
    target = os.path.realpath(entry.path)
    if os.path.commonpath([target, inside]) == inside:
        return None
    return Problem(
        entry.path,
        f"symbolic link to {target}, outside the workspace: not "
        "followed (`recalld index --follow-symlinks` follows it)",
    )


def _walk(
    root: str,
    info: os.stat_result,
    patterns: list[re.Pattern[str]],
    globs: tuple[str, ...],
    inside: str | None,
) -> Scan:
    files: dict[tuple[int, int], FoundFile] = {}
    problems: list[Problem] = []
    seen_dirs = {(info.st_dev, info.st_ino)}
    stack: list[tuple[str, list[str]]] = [(root, [])]
    while stack:
        folder, rel = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            problems.append(Problem(folder, f"cannot list folder: {exc.strerror}"))
            continue
        for entry in entries:
            child_rel = [*rel, entry.name]
            try:
                child = entry.stat()  # follows symlinks
            except OSError:
                if entry.is_symlink():
                    problems.append(Problem(entry.path, "broken symbolic link"))
                continue
            if stat.S_ISDIR(child.st_mode):
                if entry.name.startswith(".") or not _may_descend(child_rel, globs):
                    continue
                if leaves := _leaves(entry, inside):
                    problems.append(leaves)
                    continue
                key = (child.st_dev, child.st_ino)
                if key in seen_dirs:
                    if entry.is_symlink():
                        problems.append(Problem(entry.path, "symbolic link loop (not followed)"))
                    continue
                if len(child_rel) > MAX_DEPTH:
                    problems.append(Problem(entry.path, f"deeper than {MAX_DEPTH} folders"))
                    continue
                seen_dirs.add(key)
                stack.append((entry.path, child_rel))
            elif any(p.match("/".join(child_rel)) for p in patterns):
                if leaves := _leaves(entry, inside):
                    problems.append(leaves)
                    continue
                if not stat.S_ISREG(child.st_mode):
                    problems.append(Problem(entry.path, "not a regular file"))
                    continue
                found = FoundFile(entry.path, root, child.st_size, child.st_mtime_ns)
                files.setdefault((child.st_dev, child.st_ino), found)  # one file, two links
    ordered = sorted(files.values(), key=lambda f: f.path)
    return Scan(root, tuple(ordered), tuple(problems))


def folder_markdown_count(root: str, limit: int = 10_000) -> int:
    """How many ``.md`` files lie anywhere under ``root`` (to explain an empty match)."""
    count = 0
    for _, _, names in os.walk(root):
        count += sum(name.endswith(".md") for name in names)
        if count >= limit:
            break
    return count


def display(path: str) -> str:
    """A path relative to the working directory when it is inside it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path
