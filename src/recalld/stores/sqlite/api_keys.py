"""The HTTP API keys in the SQLite store's ``api_keys`` table (across tenants): each
function runs on a connection, inside the store's transaction where it writes."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

from recalld.records import ApiKey
from recalld.stores import rows as codec

_KEY_COLUMNS = "id, tenant, shared, admin, label, created_at, revoked_at"


def add(db: sqlite3.Connection, key: ApiKey, secret_hash: str) -> None:
    """Store the key and its secret's hash."""
    created = (key.created_at or datetime.now(UTC)).timestamp()
    shared = json.dumps(list(key.shared))
    db.execute(
        "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
        (key.id, secret_hash, key.tenant, shared, int(key.admin), key.label, created),
    )


def find(db: sqlite3.Connection, key_id: str) -> tuple[ApiKey, str] | None:
    """The key with this id and its secret's hash, or None."""
    row = db.execute(
        f"SELECT {_KEY_COLUMNS}, secret_hash FROM api_keys WHERE id = ?", (key_id,)
    ).fetchone()
    return None if row is None else (_api_key(row), row["secret_hash"])


def every(db: sqlite3.Connection) -> list[ApiKey]:
    """Every key, oldest first."""
    rows = db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
    return [_api_key(r) for r in rows]


def revoke(db: sqlite3.Connection, key_id: str, at: datetime) -> bool:
    """Revoke the key; False when it is unknown or already revoked."""
    done = db.execute(
        "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
        (at.timestamp(), key_id),
    )
    return done.rowcount > 0


def active(db: sqlite3.Connection) -> int:
    """How many keys are not revoked."""
    found = db.execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")
    return int(found.fetchone()[0])


def _api_key(r: sqlite3.Row) -> ApiKey:
    return ApiKey(
        id=r["id"],
        tenant=r["tenant"],
        shared=tuple(json.loads(r["shared"])),
        admin=bool(r["admin"]),
        label=r["label"],
        created_at=codec.dt(r["created_at"]),
        revoked_at=codec.dt(r["revoked_at"]),
    )
