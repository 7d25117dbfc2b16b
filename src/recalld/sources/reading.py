"""Reading one source file as text, refusing what is not a text file of sane size."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass

MAX_FILE_BYTES = 5_000_000
"""Larger files are skipped and reported: a 5 MB "note" is almost always a log or an export,
and indexing it would flood the memory with chunks (raise it with ``--max-file-mb``)."""
BOM = "\ufeff"
_NO_WAIT = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
"""Open flags: never wait for a FIFO's writer, never take a terminal as controlling one."""


class SourceReadError(Exception):
    """A file that cannot be indexed; the message says why, for a person."""


@dataclass(frozen=True)
class FileText:
    """A file's decoded text and what identifies this version of it."""

    text: str
    sha256: str
    size: int
    mtime_ns: int


def describe_size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size} bytes"


def read_text(path: str, max_bytes: int = MAX_FILE_BYTES) -> FileText:
    """The file's text (UTF-8, a leading BOM dropped).

    Raises:
        SourceReadError: not a regular file, too large, unreadable, binary or not UTF-8.
    """
    try:
        _check(os.stat(path), max_bytes)  # a special file is refused without opening it
        # The path may have become a FIFO or a device since (a swap between the stat and
        # the open): opening without blocking cannot hang on it, and the opened descriptor
        # is what is checked and read.
        handle = os.open(
            path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
        )
        with os.fdopen(handle, "rb") as opened:
            info = os.fstat(opened.fileno())
            _check(info, max_bytes)
            data = opened.read(max_bytes + 1)
    except OSError as exc:
        raise SourceReadError(f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise SourceReadError(_too_large(len(data), max_bytes))
    if b"\x00" in data:
        raise SourceReadError("binary file (it holds NUL bytes; UTF-16 text is not supported)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceReadError(
            f"not UTF-8 text (invalid byte at offset {exc.start}); convert it to UTF-8"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    return FileText(text.removeprefix(BOM), digest, len(data), info.st_mtime_ns)


def _check(info: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SourceReadError("not a regular file")
    if info.st_size > max_bytes:
        raise SourceReadError(_too_large(info.st_size, max_bytes))


def _too_large(size: int, limit: int) -> str:
    return (
        f"too large ({describe_size(size)}, over the {describe_size(limit)} limit); "
        "skipped — raise --max-file-mb to index it"
    )
