"""Files and folders only their owner can read: a store holds a person's private memories.

Everything recalld creates beside a store or in its cache (the store file, whose ``-wal``
and ``-shm`` SQLite creates with the store file's own mode, the word and ANN index folders,
the embedding cache, lock and state files) is made ``0600`` (a folder ``0700``) when it is
created, whatever the process's umask: a library must not change the umask of the program
that embeds it. Folders and files that already exist keep the mode their owner gave them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o600
"""Read and write for the owner alone."""
FOLDER_MODE = 0o700
"""Enter, list and create for the owner alone."""


def private_folder(folder: Path) -> None:
    """Create ``folder`` and each missing parent as ``0700``; existing ones are left alone."""
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            os.mkdir(path, FOLDER_MODE)
            os.chmod(path, FOLDER_MODE)  # the umask may have taken bits the mode asked for


def private_file(path: Path) -> bool:
    """Create ``path`` empty as ``0600`` unless it exists; whether it was created here."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    try:
        if hasattr(os, "fchmod"):  # (not on Windows, where modes do not apply)
            os.fchmod(handle, FILE_MODE)
    finally:
        os.close(handle)
    return True


def write_private_text(path: Path, text: str) -> None:
    """Write ``path`` atomically (a temporary file renamed in place) as ``0600``."""
    with replaced_privately(path, path.with_name(f".{path.name}.{secrets.token_hex(4)}")) as out:
        out.write(text.encode("utf-8"))


@contextlib.contextmanager
def replaced_privately(path: Path, temporary: Path) -> Iterator[BinaryIO]:
    """A new file ``temporary`` (``0600``) to write in the block, renamed to ``path`` when
    the block ends (atomically: a reader sees the old file or the whole new one), removed
    if the block fails."""
    if not private_file(temporary):
        raise FileExistsError(f"{temporary} exists")
    try:
        with temporary.open("r+b") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def make_private(folder: Path) -> None:
    """Make every file under ``folder`` ``0600`` and every folder ``0700``: for files another
    library wrote there with its own modes (tantivy's segments, usearch's saved index)."""
    for root, folders, files in os.walk(folder):
        for name in folders:
            _chmod(Path(root, name), FOLDER_MODE)
        for name in files:
            _chmod(Path(root, name), FILE_MODE)


def _chmod(path: Path, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):  # a file the library removed meanwhile
        info = os.lstat(path)
        if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o777 != mode:
            os.chmod(path, mode)
