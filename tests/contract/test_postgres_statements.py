"""A statement with named parameters sent through :mod:`recalld.stores.postgres.statements`
(converted once per text to ``$n`` placeholders) reaches the server as psycopg's own
conversion sends it: the same rows for the same values, a repeated name one parameter,
``%%`` a percent sign; and the search statement itself answers as before."""

from __future__ import annotations

from typing import Any

import pytest

from recalld.stores.postgres.statements import execute, positional

pytestmark = pytest.mark.postgres


def test_names_become_numbers_in_first_use_order() -> None:
    sql = "SELECT %(b)s, %(a)s, %(b)s, 'x%%y' LIKE %(a)s"
    assert positional(sql) == ("SELECT $1, $2, $1, 'x%y' LIKE $2", ("b", "a"))
    with pytest.raises(ValueError, match="lone"):
        positional("SELECT 5 % 3")


@pytest.mark.parametrize("binary", [True, False])
def test_the_same_rows_as_psycopg_sends(pg_database: str, binary: bool) -> None:
    import numpy as np
    import psycopg

    from recalld.stores.postgres.loaders import register

    sql = (
        "SELECT %(n)s::int + 1, %(texts)s::text[], %(n)s::int, 'a%%b' LIKE %(pattern)s,"
        " %(v)s::vector, %(nothing)s::text, %(f)s::float8 FROM generate_series(1, %(n)s)"
    )
    values: dict[str, Any] = {
        "n": 3,
        "texts": ["x", "it's", "$1", "%(n)s"],
        "pattern": "a%",
        "v": np.array([0.5, -1.25], dtype=np.float32),
        "nothing": None,
        "f": 0.1,
        "unused": "ignored",
    }
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register(conn)
        want = conn.execute(sql, values, binary=binary).fetchall()
        for _ in range(7):  # past psycopg's threshold for preparing a statement
            got = execute(conn, sql, values, binary=binary).fetchall()
            assert len(got) == len(want) == 3
            for g, w in zip(got, want, strict=True):
                assert g[:4] == w[:4] and g[5:] == w[5:] and g[4].tobytes() == w[4].tobytes()
        with pytest.raises(KeyError):
            execute(conn, sql, {"n": 1}, binary=binary)
