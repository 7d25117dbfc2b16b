"""How a store file is opened: created private, read-only when it cannot be written, and
refused for writing when a newer recalld made it.

- A new store file (and its folder) is created ``0600`` (``0700``): :mod:`recalld.private_files`.
  SQLite gives its ``-wal`` and ``-shm`` the store file's own mode.
- A store this process can read but not write (a read-only mount, a read-only file or
  folder, a backup being looked at) opens read-only: search, list and status work, no
  migration runs, and every write is refused with :attr:`Access.refusal`. SQLite opens a WAL
  store read-only only when it can reach (or create) the ``-shm`` file; on a read-only mount
  where none was left behind (or with a file and folder nobody may write), the store is
  opened ``immutable``: nothing can change it there. Elsewhere it is refused, saying why.
- A store that records a migration this code does not know was written by a newer recalld:
  its tables may mean things this version would break, so it is opened for reading only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from recalld.errors import StoreError
from recalld.private_files import private_file, private_folder
from recalld.stores.sqlite.locking import LOCK_WAIT_S, enable_wal
from recalld.stores.sqlite.migrations import APP_ID, MIGRATIONS, SCHEMA_VERSION, migrate

log = logging.getLogger("recalld")


@dataclass(frozen=True)
class Access:
    """How every connection of one store handle opens the file."""

    target: str
    """The path, or a ``file:`` URI when opened read-only."""
    uri: bool
    refusal: str | None
    """Why writes are refused (read-only file, newer schema); None when they are not."""


def prepare(path: Path) -> Access:
    """Create the store's folder and file private when missing; the way to open it."""
    folder = path.parent
    try:
        private_folder(folder)
    except OSError as exc:
        raise StoreError(f"cannot create the folder {folder}: {exc.strerror}") from exc
    if path.exists():
        if not os.access(path, os.R_OK):
            raise StoreError(f"the store file {path} is not readable by this user")
        if not (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
            return _read_only(path)
        return Access(str(path), False, None)
    if not os.access(folder, os.W_OK):
        raise StoreError(f"cannot create a store in {folder}: the folder is not writable")
    try:
        private_file(path)
    except OSError as exc:
        raise StoreError(f"cannot create the store file {path}: {exc.strerror}") from exc
    return Access(str(path), False, None)


def _read_only(path: Path) -> Access:
    """Read-only access: ``mode=ro`` when SQLite can open it so, else ``immutable``."""
    refusal = (
        f"the store {path} is read-only for this user (a read-only file, folder or "
        "mount): it can be searched and listed, not written; copy it somewhere "
        "writable, or fix its permissions, to write to it"
    )
    quoted = urllib.parse.quote(str(path.absolute()))
    wal = Path(f"{path}-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    # ``immutable`` reads the file alone, trusting that nothing changes it meanwhile: not
    # with changes still in a write-ahead log, nor where another user could write it.
    settled = not pending and _nobody_writes(path)
    for query in ("mode=ro", "immutable=1") if settled else ("mode=ro",):
        target = f"file:{quoted}?{query}"
        try:
            probe = sqlite3.connect(target, uri=True, timeout=LOCK_WAIT_S)
            try:
                probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                probe.close()
        except sqlite3.Error:
            continue
        return Access(target, True, refusal)
    if pending:
        raise StoreError(
            f"the store {path} is read-only and its last changes are still in "
            f"{wal.name}, which SQLite cannot read here: open it once where it "
            "is writable (or copy the folder somewhere writable)"
        )
    raise StoreError(
        f"the store {path} is read-only for this user, and SQLite cannot read it "
        "while another user may write it (it needs to create its -shm file "
        "beside it): read it as its owner, or from a copy"
    )


def _nobody_writes(path: Path) -> bool:
    """Whether the store cannot change while it is read: it is on a read-only file system,
    or neither it nor its folder is writable by anyone (only root could)."""
    if hasattr(os, "statvfs"):
        with contextlib.suppress(OSError):
            if os.statvfs(path).f_flag & os.ST_RDONLY:
                return True
    try:
        return not any(os.stat(p).st_mode & 0o222 for p in (path, path.parent))
    except OSError:
        return False


def exposure_advice(path: str) -> tuple[str, ...]:
    """Advice when other users can read the store (a file made by an older recalld, or
    given other modes since)."""
    exposed = []
    for name in (path, f"{path}-wal", f"{path}-shm"):
        with contextlib.suppress(OSError):
            if os.stat(name).st_mode & 0o044:
                exposed.append(name)
    if not exposed:
        return ()
    return (
        f"other users of this machine can read {', '.join(exposed)}: `chmod 600` them "
        "(recalld creates its files private; these were made otherwise)",
    )


def setup(db: sqlite3.Connection, access: Access, path: str) -> str | None:
    """Check and prepare a store on its first connection (WAL, migrations); returns why
    writes are refused, or None."""
    _check_foreign(db, path)
    if access.refusal is not None:  # read-only: it cannot be migrated, only read
        missing = missing_steps(db)
        if missing:
            raise StoreError(
                f"{access.refusal}; and it needs upgrading first (schema steps "
                f"{', '.join(missing)}), which writes to it"
            )
        return access.refusal
    enable_wal(db)
    newer = newer_schema(db, path)
    if newer is not None:
        log.warning("%s", newer)
        return newer
    # The write lock only when there is something to write. A store that passed
    # _check_foreign is marked as recalld's or empty, and an empty one lacks every step.
    if missing_steps(db):
        migrate(db)
    return None


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _check_foreign(db: sqlite3.Connection, path: str) -> None:
    """Refuse an SQLite database that another program made (recalld marks its own)."""
    tables = _tables(db)
    if not tables:
        return
    app = None
    if "meta" in tables:
        found = db.execute("SELECT value FROM meta WHERE key = 'app'").fetchone()
        app = found[0] if found else None
    if app != APP_ID:
        raise StoreError(
            f"{path} is an SQLite database of another program, not a recalld store; "
            "refusing to touch it"
        )


def newer_schema(db: sqlite3.Connection, path: str) -> str | None:
    """Why writes must be refused when a newer recalld migrated the store; else None."""
    unknown = [(number, name) for number, name in _applied(db) if number > SCHEMA_VERSION]
    if not unknown:
        return None
    newest = max(number for number, _ in unknown)
    names = ", ".join(name for _, name in sorted(unknown))
    return (
        f"the store {path} was written by a newer recalld (schema version {newest}, "
        f"this recalld knows up to {SCHEMA_VERSION}; newer steps: {names}); it can be "
        "searched and listed, not written: upgrade recalld to write to it"
    )


def missing_steps(db: sqlite3.Connection) -> list[str]:
    """The migrations this code knows that the store has not had."""
    have = {number for number, _ in _applied(db)}
    return [name for number, name, _ in MIGRATIONS if number not in have]


def _applied(db: sqlite3.Connection) -> list[tuple[int, str]]:
    """The recorded migrations, read without creating their table (a read-only store)."""
    found = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'"
    ).fetchone()
    if found is None:
        return []
    return [(int(r[0]), str(r[1])) for r in db.execute("SELECT id, name FROM migrations")]
