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
