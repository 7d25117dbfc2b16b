"""A statement with named ``%(name)s`` parameters sent as PostgreSQL's own ``$n`` one, its
conversion made once per distinct text.

psycopg parses a statement's placeholders on every ``execute`` and keeps the result only
for statements of up to 4 kB; a search's one statement is 10-12 kB, and parsing it cost
about 0.3 ms of client CPU per search, while a small tenant's searches send only a handful
of distinct texts (6 in 148 statements of 100 questions). Here the text is converted once
and the values are passed in order through a :class:`psycopg.RawCursor`, which sends the
statement as it is: the same statement and values reach the server.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import psycopg

STATEMENTS_KEPT = 64
"""Distinct statement texts whose conversion is kept (each 10-12 kB: under 1 MB in all)."""
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")


@functools.lru_cache(maxsize=STATEMENTS_KEPT)
def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with each ``%(name)s`` as ``$n`` (one number per name, as psycopg numbers
    them) and ``%%`` as ``%``; and the names in their numbers' order."""
    names: dict[str, int] = {}

    def number(found: re.Match[str]) -> str:
        name = found.group(1)
        if name is None:
            if found.group(0) == "%%":
                return "%"
            raise ValueError("a statement's lone '%' (not '%%' nor '%(name)s')")
        return f"${names.setdefault(name, len(names) + 1)}"

    return _PLACEHOLDER.sub(number, sql), tuple(names)


def execute(
    conn: psycopg.Connection[Any],
    sql: str,
    values: Mapping[str, Any],
    *,
    binary: bool,
    prepare: bool = False,
) -> psycopg.RawCursor[Any]:
    """``sql`` run on ``conn`` with the named ``values`` (missing ones: ``KeyError``, as
    psycopg refuses them); the cursor, to fetch from. ``prepare``: prepared at its first
    use (else as psycopg decides: at its sixth on the connection)."""
    raw, names = positional(sql)
    cursor = psycopg.RawCursor(conn)
    return cursor.execute(
        raw, [values[name] for name in names], binary=binary, prepare=True if prepare else None
    )
