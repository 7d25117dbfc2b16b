"""The PostgreSQL + pgvector backend (needs the ``postgres`` extra)."""

from recalld.stores.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
