"""API keys on both backends: stored hashed, found across tenants, revoked for good."""

from __future__ import annotations

import pytest

from recalld import InvalidInputError, NotFoundError
from recalld.keys import create_key, hash_secret, key_store, revoke_key, verify

from .conftest import Opener


def test_keys_are_kept_hashed_and_checked(open_as: Opener) -> None:
    root = open_as()
    record, key = create_key(root.store, "alice", shared=["team"], label="laptop")
    other_record, other = create_key(open_as("bob").store, "bob", admin=True)
    store = key_store(root.store)
    found = store.find_key(record.id)
    assert found is not None
    kept, digest = found
    secret = key.split("_", 2)[2]
    assert digest == hash_secret(secret) and secret not in digest
    assert (kept.tenant, kept.shared, kept.admin, kept.label) == ("alice", ("team",), False,
                                                                  "laptop")  # fmt: skip
    assert verify(root.store, key).key == kept
    assert verify(root.store, other).key is not None and verify(root.store, other).key.admin
    assert verify(root.store, key[:-2] + "xx").key is None
    assert verify(root.store, "rk_ffffffffffff_nothing").key is None
    assert verify(root.store, "garbage").reason == "invalid API key"
    assert [k.id for k in store.list_keys()] == [record.id, other_record.id]
    assert store.active_keys() == 2

    revoked = revoke_key(root.store, key)
    assert revoked.revoked_at is not None
    assert verify(root.store, key).reason == "this API key was revoked"
    assert store.active_keys() == 1
    with pytest.raises(InvalidInputError, match="already revoked"):
        revoke_key(root.store, record.id)
    with pytest.raises(NotFoundError):
        revoke_key(root.store, "000000000000")
    with pytest.raises(InvalidInputError, match="invalid tenant"):
        create_key(root.store, "bad name")
