"""Adapters stay thin: nothing under ``recalld.interfaces`` touches a database directly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import recalld

INTERFACES = Path(recalld.__file__).parent / "interfaces"
FORBIDDEN = ("sqlite3", "psycopg", "psycopg2", "recalld.stores")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, wherever the import statement is (lazy ones included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            names.update(a.value for a in node.args if isinstance(a, ast.Constant)
                         and isinstance(a.value, str))  # fmt: skip
    return names


def _violations(names: set[str]) -> list[str]:
    return sorted(n for n in names for f in FORBIDDEN if n == f or n.startswith(f + "."))


ADAPTERS = sorted(INTERFACES.rglob("*.py"))


def test_there_are_adapters_to_check() -> None:
    assert INTERFACES / "cli.py" in ADAPTERS


@pytest.mark.parametrize("path", ADAPTERS, ids=lambda p: p.name)
def test_interfaces_never_import_a_store_or_database_driver(path: Path) -> None:
    assert _violations(imported_modules(path)) == []


def test_the_check_catches_violations(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text(
        "import sqlite3\n"
        "def f():\n    from recalld.stores.sqlite import SQLiteStore\n"
        "from recalld import stores\n",
        encoding="utf-8",
    )
    assert _violations(imported_modules(sample)) == [
        "recalld.stores", "recalld.stores.sqlite", "recalld.stores.sqlite.SQLiteStore", "sqlite3"
    ]  # fmt: skip


STATUS_RECEIVERS = ("status", "record")
"""The names an adapter may read a ``.store`` field of: a :class:`~recalld.engine.Status`
(its store's counts) and a discovery record (the store a server serves); anything else
with a ``.store`` is an engine's backend."""


def store_reaches(path: Path) -> list[int]:
    """The lines of a file that read ``.store`` of something that is not a status (an
    engine's backend), or ask for it with ``getattr``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "store":
            receiver = node.value
            if isinstance(receiver, ast.Call):
                receiver = receiver.func
            name = getattr(receiver, "id", None) or getattr(receiver, "attr", None)
            if name not in STATUS_RECEIVERS:
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr":
            named = [a.value for a in node.args if isinstance(a, ast.Constant)]
            lines += [node.lineno] if "store" in named else []
    return sorted(lines)


@pytest.mark.parametrize("path", ADAPTERS, ids=lambda p: p.name)
def test_no_adapter_reaches_an_engines_store(path: Path) -> None:
    assert store_reaches(path) == []


def test_the_store_check_catches_reaches(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text(
        "a = engine.store\n"
        "b = state.root.store.list_keys()\n"
        "c = getattr(engine, 'store')\n"
        "d = engine.status().store.memories\n"
        "e = status.store\n",
        encoding="utf-8",
    )
    assert store_reaches(sample) == [1, 2, 3]
