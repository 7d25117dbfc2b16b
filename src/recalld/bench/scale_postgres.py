"""The PostgreSQL side of the benchmarks: one database per corpus size on one server
(``bench scale``), and throwaway databases (the parity benchmark, the tests)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

from recalld.errors import InvalidInputError, install_hint
from recalld.local_postgres import APP_ROLE

__all__ = ["APP_ROLE", "database_dsn", "role_dsn", "searched_as"]


def database_dsn(admin_dsn: str, name: str) -> str:
    """The admin DSN pointed at the database ``name`` of the same server."""
    return urlunsplit(urlsplit(admin_dsn)._replace(path=f"/{name}"))


def _admin(admin_dsn: str):  # type: ignore[no-untyped-def]
    try:
        import psycopg
    except ImportError as exc:
        raise InvalidInputError(
            f"the postgres backend needs the postgres extra: {install_hint('postgres')}"
        ) from exc
    try:
        return psycopg.connect(admin_dsn, autocommit=True)
    except psycopg.Error as exc:
        raise InvalidInputError(f"cannot connect to --postgres: {exc}") from exc


@contextmanager
def temporary_database(admin_dsn: str, prefix: str) -> Iterator[str]:
    """A new, empty database ``<prefix>_<random>`` on the admin DSN's server (its DSN),
    dropped on leaving."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with _admin(admin_dsn) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield database_dsn(admin_dsn, name)
    finally:
        with _admin(admin_dsn) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def exists(admin_dsn: str, name: str) -> bool:
    with _admin(admin_dsn) as conn:
        return (
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            is not None
        )


def recreate(admin_dsn: str, name: str) -> None:
    """Drop the database ``name`` if it exists (only a ``recalld_scale_`` one), then create it
    empty."""
    if not name.startswith("recalld_scale_") or not name.replace("_", "").isalnum():
        raise InvalidInputError(f"refusing to recreate the database {name!r}")
    with _admin(admin_dsn) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def sizes(dsn: str) -> tuple[int, int]:
    """Bytes of the whole database, and of its HNSW vector index."""
    with _admin(dsn) as conn:
        row = conn.execute(
            "SELECT pg_database_size(current_database()),"
            " coalesce(pg_relation_size(to_regclass('memories_embedding')), 0)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def role_dsn(admin_dsn: str, name: str, role: str) -> str:
    """The DSN the searches of the database ``name`` connect with: as ``role`` (created,
    like ``recalld postgres start`` makes it, when the server has no such role; granted
    the database's tables), or, for an empty ``role``, as the admin DSN's own user.

    The role logs in with the admin DSN's host and port and no password: a local server
    (``recalld postgres start``) lets it; another server needs a ``~/.pgpass`` entry.
    Loading and building stay with the admin DSN.
    """
    dsn = database_dsn(admin_dsn, name)
    if not role:
        return dsn
    if not role.replace("_", "").isalnum():
        raise InvalidInputError(f"not a role name: {role!r}")
    try:
        _grant(admin_dsn, name, role)
    except _psycopg_error() as exc:
        raise InvalidInputError(
            f"cannot search as the role {role}: {exc}; "
            "--postgres-role '' searches as the admin DSN's own user"
        ) from exc
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def _grant(admin_dsn: str, name: str, role: str) -> None:
    """``role`` made when missing (as ``recalld postgres start`` makes it) and granted the
    database ``name`` and its tables."""
    with _admin(admin_dsn) as conn:
        conn.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN"
            f" CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;"
            " END IF; END $$;"
        )
        conn.execute(f"GRANT CONNECT, TEMPORARY ON DATABASE {name} TO {role}")
    with _admin(database_dsn(admin_dsn, name)) as conn:
        # CREATE as a local server gives it: the store opens with CREATE TABLE IF NOT
        # EXISTS, which PostgreSQL checks before it finds the table there.
        conn.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
        conn.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")


def _psycopg_error() -> type[Exception]:
    import psycopg

    return psycopg.Error


def searched_as(store: object) -> dict[str, object]:
    """Who a PostgreSQL store's connections are, seen from one of them: ``role``
    (``current_user``) and ``row_security`` (whether the tenant wall binds it on
    ``memories``). Empty for another backend."""
    connect = getattr(store, "_conn", None)
    if connect is None:
        return {}
    with connect() as conn:
        found = conn.execute("SELECT current_user, row_security_active('memories')").fetchone()
    return {"role": str(found[0]), "row_security": bool(found[1])}
