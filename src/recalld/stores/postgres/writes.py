"""The pieces of a PostgreSQL store's writes that need no handle: the binary ``COPY`` of
new rows through a session-local table, session positions, and the vector column's state."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from recalld.records import Memory
from recalld.stores import rows as codec
from recalld.stores.postgres.migrations import WHOLE_ROW_BYTES

Conn = psycopg.Connection[Any]

LOAD_TABLE = "recalld_load"
"""Each connection's temporary table that new rows are copied into; its rows stay whole as
``memories``' do (``WHOLE_ROW_BYTES``), or their values would arrive there compressed."""
LOAD_COLUMNS = f"{codec.COLUMNS}, lex_tokens, lex_length, embedding"
CREATE_LOAD = (
    f"CREATE TEMP TABLE IF NOT EXISTS {LOAD_TABLE}"
    f" WITH (toast_tuple_target = {WHOLE_ROW_BYTES}) ON COMMIT DELETE ROWS AS SELECT"
    f" {codec.COLUMNS}, lex_tokens, lex_length, embedding::vector AS embedding,"
    " 0::bigint AS ord FROM memories WITH NO DATA"
)
LOAD_TYPES = (
    f"SELECT atttypid::int FROM pg_attribute WHERE attrelid = 'pg_temp.{LOAD_TABLE}'::regclass"
    " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)
_FROM_LOAD = (
    f"WITH batch AS (DELETE FROM {LOAD_TABLE} RETURNING *) INSERT INTO memories"
    f" ({LOAD_COLUMNS}) SELECT {LOAD_COLUMNS} FROM batch ORDER BY ord"
)


def copy_rows(conn: Conn, rows: Iterable[tuple[Any, ...]], types: Sequence[int]) -> None:
    """``rows`` (of :data:`LOAD_COLUMNS`) into ``memories``: a binary ``COPY`` into the load
    table (of column ``types``), then ONE ``INSERT ... SELECT`` in their order."""
    with conn.cursor() as cur:
        with cur.copy(
            f"COPY {LOAD_TABLE} ({LOAD_COLUMNS}, ord) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(types)
            for i, row in enumerate(rows):
                copy.write_row((*row, i))
        cur.execute(_FROM_LOAD)


def insert_rows(conn: Conn, rows: Iterable[tuple[Any, ...]]) -> None:
    """``rows`` into ``memories``, one ``INSERT`` each (a role without ``TEMP``)."""
    marks = ", ".join(["%s"] * (len(codec.COLUMN_NAMES) + 3))
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO memories ({LOAD_COLUMNS}) VALUES ({marks})", list(rows))


def positions(conn: Conn, memories: Sequence[Memory], namespaces: list[str]) -> list[int | None]:
    """Given positions, else the places after each session's last (sessions locked,
    in one statement; their last positions read in one more)."""
    sessions = sorted(
        {
            (ns, m.session_id)
            for m, ns in zip(memories, namespaces, strict=True)
            if m.session_id is not None and m.position is None
        }
    )
    nxt: dict[tuple[str, str], int] = {}
    if sessions:
        keys = [f"{ns}\x1f{session}" for ns, session in sessions]
        conn.execute(
            "SELECT count(pg_advisory_xact_lock(hashtext(k)))"
            " FROM unnest(%s::text[]) WITH ORDINALITY AS s(k, o)",
            (keys,),
        )
        found = conn.execute(
            "SELECT s.o, (SELECT max(m.position) FROM memories m WHERE m.namespace = s.ns"
            " AND m.session_id = s.sid) FROM unnest(%s::text[], %s::text[])"
            " WITH ORDINALITY AS s(ns, sid, o)",
            ([ns for ns, _ in sessions], [sid for _, sid in sessions]),
        ).fetchall()
        for o, last in found:
            nxt[sessions[o - 1]] = 0 if last is None else last + 1
    out: list[int | None] = []
    for memory, ns in zip(memories, namespaces, strict=True):
        if memory.position is not None or memory.session_id is None:
            out.append(memory.position)
            continue
        key = (ns, memory.session_id)
        out.append(nxt[key])
        nxt[key] += 1
    return out


def vector_column(conn: Conn) -> tuple[int | None, bool]:
    """The vector column's dimension (None before the first vector) and whether its
    HNSW index exists."""
    found = conn.execute(
        "SELECT atttypmod, to_regclass('memories_embedding') IS NOT NULL FROM pg_attribute"
        " WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
    ).fetchone()
    if found is None:
        return None, False
    return (None if found[0] < 0 else int(found[0])), bool(found[1])
