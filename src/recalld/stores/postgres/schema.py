"""Running the PostgreSQL store's migrations (the steps are in
:mod:`recalld.stores.postgres.migrations`): their list, in order, and the runner that applies
those a database lacks, under an advisory lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recalld.errors import StoreError
from recalld.stores.postgres.migrations import (
    APP_ID,
    m001_initial,
    m002_sources,
    m003_api_keys,
    m004_fts5_words,
    m005_lex_rows,
    m006_tenant_words,
    m007_tenant_keys,
    m008_inline_vectors,
    m009_word_postings,
    m010_collections,
    m011_estimable_wall,
)
from recalld.stores.postgres.migrations_words import (
    m012_lex_sets,
    m013_word_texts,
    m014_untrusted_word_ranks,
)

Migration = tuple[int, str, Callable[[Any], None]]
MIGRATIONS: list[Migration] = [
    (1, "m001_initial", m001_initial),
    (2, "m002_sources", m002_sources),
    (3, "m003_api_keys", m003_api_keys),
    (4, "m004_fts5_words", m004_fts5_words),
    (5, "m005_lex_rows", m005_lex_rows),
    (6, "m006_tenant_words", m006_tenant_words),
    (7, "m007_tenant_keys", m007_tenant_keys),
    (8, "m008_inline_vectors", m008_inline_vectors),
    (9, "m009_word_postings", m009_word_postings),
    (10, "m010_collections", m010_collections),
    (11, "m011_estimable_wall", m011_estimable_wall),
    (12, "m012_lex_sets", m012_lex_sets),
    (13, "m013_word_texts", m013_word_texts),
    (14, "m014_untrusted_word_ranks", m014_untrusted_word_ranks),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def refuse_foreign(conn: Any, where: str) -> None:
    """Refuse a database whose ``memories`` table is not recalld's."""
    found = conn.execute(
        "SELECT to_regclass('memories') IS NOT NULL, to_regclass('recalld_meta') IS NOT NULL"
    ).fetchone()
    if found is not None and found[0] and not found[1]:
        raise StoreError(f"{where} has a memories table of another program; refusing to touch it")


def migrate(conn: Any, upto: int | None = None) -> list[str]:
    """Apply pending migrations (up to ``upto``) in order, one transaction each, under an
    advisory lock so that two processes opening a new store do not race."""
    done: list[str] = []
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('recalld_migrations'))")
        cur.execute(
            "CREATE TABLE IF NOT EXISTS recalld_migrations (id integer PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur.execute("SELECT id FROM recalld_migrations")
        have = {row[0] for row in cur.fetchall()}
        for number, name, step in MIGRATIONS:
            if number in have or (upto is not None and number > upto):
                continue
            with conn.transaction():
                step(cur)
                cur.execute(
                    "INSERT INTO recalld_migrations (id, name) VALUES (%s, %s)", (number, name)
                )
            done.append(name)
        cur.execute(
            "INSERT INTO recalld_meta VALUES ('app', %s) ON CONFLICT (key) DO NOTHING", (APP_ID,)
        )
    return done
