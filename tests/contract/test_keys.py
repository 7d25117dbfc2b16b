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


def test_granting_another_tenants_own_namespace_needs_force(open_as: Opener) -> None:
    root = open_as()
    create_key(root.store, "alice")
    alice = open_as("alice")
    secret = alice.add("alice's private diary entry").id
    for taken in ("alice", "default"):
        with pytest.raises(InvalidInputError, match=f"'{taken}' is another tenant's own"):
            create_key(root.store, "eve", shared=["team", taken])
    assert [k.tenant for k in key_store(root.store).list_keys()] == ["alice"]  # nothing made
    record, _ = create_key(root.store, "eve", shared=["team"])  # a shared namespace is fine
    assert record.shared == ("team",)
    forced, _ = create_key(root.store, "eve", shared=["alice"], force=True)
    assert forced.shared == ("alice",)
    assert open_as("eve", shared=forced.shared).get(secret).content == "alice's private diary entry"


def test_the_cli_refuses_the_grant_without_force(store_location: str) -> None:
    from click.testing import CliRunner

    from recalld.interfaces.cli import cli

    def create(*argv: str) -> tuple[int, str]:
        done = CliRunner().invoke(cli, ["--db", store_location, "--embedder", "fake", "keys",
                                        "create", *argv])  # fmt: skip
        return done.exit_code, done.output

    assert create("--tenant", "alice")[0] == 0
    code, output = create("--tenant", "eve", "--namespace", "alice")
    assert code == 2 and "'alice' is another tenant's own namespace" in output
    assert "--force" in output
    assert create("--tenant", "eve", "--namespace", "alice", "--force")[0] == 0


def test_the_engines_keys_facade_reaches_every_tenants_keys(open_as: Opener) -> None:
    root, bob = open_as(), open_as("bob")
    record, key = root.keys.create("alice", shared=["team"], label="laptop")
    assert bob.keys.verify(key).key == record  # the keys are the server's, not a tenant's
    assert [k.id for k in bob.keys.list()] == [record.id] and bob.keys.active() == 1
    assert root.keys.revoke(record.id).revoked_at is not None
    assert root.keys.active() == 0 and root.keys.verify(key).reason == "this API key was revoked"
    with pytest.raises(InvalidInputError, match="another tenant's own namespace"):
        root.keys.create("bob", shared=["default"])
