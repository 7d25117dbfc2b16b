"""Administration of a PostgreSQL store, apart from its reads and writes: the tenant's
indexes built on demand (:class:`~recalld.stores.base.IndexBuilding`), its status and the
advice in it, and the API keys kept across tenants (:class:`~recalld.stores.base.KeyStore`).

:class:`Administration` is a part of :class:`~recalld.stores.postgres.store.PostgresStore`
(a base class): its methods use the handle's connections and what it sees
(:class:`Handle`), and run the SQL of :mod:`recalld.stores.postgres.indexes`."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

import psycopg

from recalld.errors import InvalidInputError
from recalld.records import ApiKey
from recalld.stores import rows as codec
from recalld.stores.base import IndexBuild, IndexKind, StoreStats, Tenancy, day_counts
from recalld.stores.postgres import indexes as ix
from recalld.stores.postgres.failures import raising_store_errors
from recalld.stores.postgres.results import get_meta, unfinished_migration
from recalld.stores.postgres.schema import SCHEMA_VERSION


class Handle(Protocol):
    """What administration needs of a store handle."""

    tenancy: Tenancy
    path: str
    _dsn: str
    _visible: list[str]
    _own_beam: int
    _word_postings: bool

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    def _read(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...


@raising_store_errors
class Administration:
    """Index builds, status and API keys of a PostgreSQL store handle."""

    # -- the tenant's indexes, on demand -----------------------------------------------------

    def build_index(self: Handle, kind: IndexKind, *, drop: bool = False) -> IndexBuild:
        if kind == "vectors":
            namespace = ix.alone(self._visible, "an own vector index is")
            name = ix.build_own_vector_index(self._dsn, namespace, drop)
            return IndexBuild(kind, name, drop)
        if kind == "words":
            namespace = ix.alone(self._visible, "word postings are")
            with self._conn() as conn:
                written = ix.build_word_postings(conn, namespace, drop)
            if not drop:
                ix.vacuum_word_postings(self._dsn)
            return IndexBuild(kind, "word_postings", drop, written)
        raise InvalidInputError(f"unknown index kind {kind!r}; one of vectors, words")

    def advised_indexes(self: Handle) -> frozenset[IndexKind]:
        with self._read() as conn:
            memories, _ = ix.word_rows(conn, self._visible)
        has = ix.Indexes(self._own_beam, self._word_postings)
        advised: frozenset[IndexKind] = frozenset()
        if ix.advises_word_postings(self._visible, has, memories):
            advised |= {"words"}
        return advised

    # -- status --------------------------------------------------------------------------

    def stats(self: Handle) -> StoreStats:
        with self._conn() as conn:
            one = conn.execute(
                "SELECT count(*), count(forgotten_at), count(DISTINCT session_id),"
                " min(ref_time), max(ref_time), count(embedding) FROM memories"
                " WHERE namespace = ANY(%s)",
                (self._visible,),
            ).fetchone()
            assert one is not None
            types = conn.execute(
                "SELECT type, count(*) FROM memories WHERE namespace = ANY(%s)"
                " AND forgotten_at IS NULL GROUP BY type",
                (self._visible,),
            ).fetchall()
            sources = conn.execute(
                "SELECT source_kind, count(*) FROM memories WHERE namespace = ANY(%s)"
                " AND forgotten_at IS NULL GROUP BY source_kind",
                (self._visible,),
            ).fetchall()
            days = conn.execute(
                "SELECT floor(created_at / 86400)::bigint AS day, count(*) FROM memories"
                " WHERE namespace = ANY(%s) GROUP BY day ORDER BY day",
                (self._visible,),
            ).fetchall()
            size = conn.execute("SELECT pg_total_relation_size('memories')").fetchone()
            fingerprint = get_meta(conn, "embedding_fingerprint")
            unfinished = unfinished_migration(conn, self._visible)
            _, table_rows = ix.word_rows(conn, self._visible)
        has = ix.Indexes(self._own_beam, self._word_postings)
        return StoreStats(
            path=self.path,
            memories=one[0] - one[1],
            forgotten=one[1],
            with_vectors=one[5],
            fingerprint=fingerprint,
            schema_version=SCHEMA_VERSION,
            size_bytes=int(size[0]) if size else 0,
            by_type={str(t): int(n) for t, n in types},
            sessions=one[2],
            oldest=codec.dt(one[3]),
            newest=codec.dt(one[4]),
            unfinished_migration=unfinished,
            by_source={str(k): int(n) for k, n in sources},
            added_by_day=day_counts(days),
            vector_index="own" if self._own_beam else "table",
            advice=ix.advice(self._visible, has, one[0], table_rows),
        )

    # -- API keys (across tenants) ---------------------------------------------------------

    def add_key(self: Handle, key: ApiKey, secret_hash: str) -> None:
        created = (key.created_at or datetime.now(UTC)).timestamp()
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO api_keys VALUES (%s, %s, %s, %s, %s, %s, %s, NULL)",
                (key.id, secret_hash, key.tenant, list(key.shared), key.admin, key.label, created),
            )

    def find_key(self: Handle, key_id: str) -> tuple[ApiKey, str] | None:
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS}, secret_hash FROM api_keys WHERE id = %s", (key_id,)
            ).fetchone()
        return None if row is None else (_api_key(row), str(row[7]))

    def list_keys(self: Handle) -> list[ApiKey]:
        with self._conn() as conn:
            rows = conn.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
            return [_api_key(r) for r in rows.fetchall()]

    def revoke_key(self: Handle, key_id: str, at: datetime) -> bool:
        with self._conn() as conn:
            done = conn.execute(
                "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
                (at.timestamp(), key_id),
            )
            return done.rowcount > 0

    def active_keys(self: Handle) -> int:
        with self._conn() as conn:
            found = conn.execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")
            row = found.fetchone()
            return int(row[0]) if row else 0


_KEY_COLUMNS = "id, tenant, shared, admin, label, created_at, revoked_at"


def _api_key(r: Sequence[Any]) -> ApiKey:
    return ApiKey(
        id=r[0],
        tenant=r[1],
        shared=tuple(r[2] or ()),
        admin=bool(r[3]),
        label=r[4],
        created_at=codec.dt(r[5]),
        revoked_at=codec.dt(r[6]),
    )
