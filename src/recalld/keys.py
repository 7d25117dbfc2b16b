"""HTTP API keys: made here, kept hashed in the store, checked by the server.

A key reads ``rk_<id>_<secret>``: the id (12 hex digits) finds the key's record, the
secret (32 random bytes, URL-safe base64) is compared with the stored SHA-256 in constant
time. The secret has 256 bits of entropy, so a fast hash is safe: nobody can guess their
way to a key offline. The key is shown once, when it is made; lost keys are revoked and
replaced.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from recalld.errors import InvalidInputError, NotFoundError, StoreError
from recalld.records import ApiKey
from recalld.stores.base import DEFAULT_TENANT, KeyStore, Tenancy

PREFIX = "rk"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def key_store(store: object) -> KeyStore:
    """The store's key table, or a clear error for a backend without one."""
    if not isinstance(store, KeyStore):
        raise StoreError("this store's backend does not keep API keys")
    return store


def create_key(
    store: object,
    tenant: str,
    *,
    shared: Sequence[str] = (),
    admin: bool = False,
    label: str | None = None,
    force: bool = False,
) -> tuple[ApiKey, str]:
    """Make and store a key for ``tenant`` (and the ``shared`` namespaces it may use);
    returns the record and the key itself, which nothing keeps.

    Raises:
        InvalidInputError: a shared namespace is another tenant's own (the ``default``
            tenant's, or the tenant of an existing key) and ``force`` is not given: the key
            would read and change that tenant's private memories.
    """
    grant = Tenancy(tenant, tuple(shared))  # checks the names
    keys = key_store(store)
    if not force:
        tenants = {DEFAULT_TENANT, *(k.tenant for k in keys.list_keys())} - {grant.tenant}
        taken = [name for name in grant.shared if name in tenants]
        if taken:
            raise InvalidInputError(
                f"{', '.join(repr(n) for n in taken)} is another tenant's own namespace: a "
                f"key of tenant {grant.tenant!r} granted it would read and change that "
                "tenant's private memories; grant a shared namespace (such as 'team') "
                "instead, or pass --force (force=True) if that is meant"
            )
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    record = ApiKey(
        id=key_id,
        tenant=grant.tenant,
        shared=grant.shared,
        admin=admin,
        label=label,
        created_at=datetime.now(UTC),
    )
    keys.add_key(record, hash_secret(secret))
    return record, f"{PREFIX}_{key_id}_{secret}"


def revoke_key(store: object, key_id: str) -> ApiKey:
    """Revoke a key by its id (or by the whole key).

    Raises:
        NotFoundError: no such key, or it is already revoked.
    """
    keys = key_store(store)
    wanted = parse_key(key_id)[0] if key_id.startswith(f"{PREFIX}_") else key_id
    if not keys.revoke_key(wanted, datetime.now(UTC)):
        found = keys.find_key(wanted)
        if found is None:
            raise NotFoundError(f"unknown key id {wanted}")
        raise InvalidInputError(f"key {wanted} is already revoked")
    found = keys.find_key(wanted)
    assert found is not None
    return found[0]


def parse_key(token: str) -> tuple[str, str]:
    """(id, secret) of a key.

    Raises:
        InvalidInputError: the text is not shaped like a recalld key.
    """
    parts = token.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        raise InvalidInputError("not a recalld API key (they read rk_<id>_<secret>)")
    return parts[1], parts[2]


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking a key: the key, or why it was refused."""

    key: ApiKey | None
    reason: str = ""


def verify(store: object, token: str) -> Verdict:
    """Check a presented key against the store."""
    try:
        key_id, secret = parse_key(token)
    except InvalidInputError:
        return Verdict(None, "invalid API key")
    found = key_store(store).find_key(key_id)
    if found is None or not hmac.compare_digest(found[1], hash_secret(secret)):
        return Verdict(None, "invalid API key")
    if found[0].revoked_at is not None:
        return Verdict(None, "this API key was revoked")
    return Verdict(found[0])


class KeyAdmin:
    """The API keys kept in one store (across tenants: a key names its tenant)."""

    def __init__(self, store: object) -> None:
        self._store = store

    def create(
        self,
        tenant: str,
        *,
        shared: Sequence[str] = (),
        admin: bool = False,
        label: str | None = None,
        force: bool = False,
    ) -> tuple[ApiKey, str]:
        """A new key: its record and the key itself, shown once (see
        :func:`create_key`)."""
        return create_key(self._store, tenant, shared=shared, admin=admin, label=label, force=force)

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key by its id or by the whole key (see :func:`revoke_key`)."""
        return revoke_key(self._store, key_id)

    def list(self) -> list[ApiKey]:
        """Every key, oldest first, revoked ones too (never a secret)."""
        return key_store(self._store).list_keys()

    def active(self) -> int:
        """How many keys are not revoked (0: the server answers without one, locally)."""
        return key_store(self._store).active_keys()

    def verify(self, token: str) -> Verdict:
        """The key a request presents, or why it is refused."""
        return verify(self._store, token)
