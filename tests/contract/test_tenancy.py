"""Tenants: no facade method reaches another tenant's memories; shared namespaces are explicit.

Every attempt across the wall fails as an unknown id (or finds nothing) and changes nothing:
the victim's memories, vectors and access counts are compared before and after.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

import recalld
from recalld import InvalidInputError, NotFoundError
from recalld.providers.embedders import FakeEmbedder
from recalld.stores.asks import WordsAsk

from .conftest import Opener


def _state(engine: recalld.MemoryEngine) -> tuple[object, ...]:
    """Everything a tenant can observe of its own memories, vectors included."""
    memories = engine.list(limit=1000, include_forgotten=True)
    vectors = engine.store.vectors_for([m.id for m in memories])
    return (
        sorted((m.id, m.content, m.forgotten_at, m.access_count, m.updated_at) for m in memories),
        sorted((i, v.tobytes()) for i, v in vectors.items()),
        engine.status().store.memories,
    )


@pytest.fixture
def alice(open_as: Opener) -> recalld.MemoryEngine:
    engine = open_as("alice")
    engine.add("Alice's bank PIN hint is the name of her first cat", id="secret",
               tags=["private"], session_id="s1")  # fmt: skip
    engine.add("Alice moved to Lisbon in March", session_id="s1")
    return engine


def test_another_tenant_cannot_read_update_or_forget(alice: recalld.MemoryEngine,
                                                     open_as: Opener) -> None:  # fmt: skip
    before = _state(alice)
    guessed = [m.id for m in alice.list()]
    bob = open_as("bob")
    for memory_id in [*guessed, "secret"]:
        with pytest.raises(NotFoundError, match="unknown id"):
            bob.get(memory_id)
        with pytest.raises(NotFoundError, match="unknown id"):
            bob.update(memory_id, content="overwritten by bob")
        with pytest.raises(NotFoundError, match="unknown id"):
            bob.update(memory_id, tags=["bob"])
        with pytest.raises(NotFoundError, match="unknown id"):
            bob.forget(memory_id)
        with pytest.raises(NotFoundError, match="unknown id"):
            bob.forget(memory_id, hard=True)
    # The store itself enforces the wall, not only the facade's checks.
    assert bob.store.get_many(guessed) == []
    assert bob.store.forget(guessed, hard=True, at=datetime.now(UTC)) == 0
    bob.store.record_access(guessed, datetime.now(UTC))
    assert bob.store.vectors_for(guessed) == {}
    assert bob.store.session_neighbors(guessed, 3) == {}
    assert _state(alice) == before


def test_another_tenant_finds_nothing(alice: recalld.MemoryEngine, open_as: Opener) -> None:
    before = _state(alice)
    bob = open_as("bob")
    assert bob.search("bank PIN cat", mode="hybrid", record_access=True).hits == ()
    assert bob.search("Lisbon", mode="vector").hits == ()
    assert bob.search("Lisbon", tags=["private"]).hits == ()
    assert bob.context("Where did Alice move?").text == ""
    assert bob.list(limit=100, include_forgotten=True) == []
    status = bob.status().store
    assert (status.memories, status.forgotten, status.with_vectors, status.sessions) == (0, 0, 0, 0)
    assert _state(alice) == before
    assert {h.memory.id for h in alice.search("bank PIN cat", mode="hybrid").hits} >= {"secret"}


def test_the_same_explicit_id_in_two_tenants_is_two_memories(alice: recalld.MemoryEngine,
                                                             open_as: Opener) -> None:  # fmt: skip
    before = _state(alice)
    bob = open_as("bob")
    result = bob.add("Bob's own note", id="secret")
    assert result.created
    assert bob.get("secret").content == "Bob's own note"
    assert alice.get("secret").content.startswith("Alice's bank PIN")
    bob.forget("secret", hard=True)
    assert _state(alice) == before


def test_dedupe_never_points_at_another_tenant(alice: recalld.MemoryEngine,
                                               open_as: Opener) -> None:  # fmt: skip
    bob = open_as("bob")
    result = bob.add("Alice moved to Lisbon in March", session_id="s1")
    assert result.created and result.duplicate_of is None


def test_reindex_reaches_only_the_tenant(alice: recalld.MemoryEngine, open_as: Opener) -> None:
    before = _state(alice)
    bob = open_as("bob")
    bob.add("Bob likes sailing")
    assert bob.reindex() == 1
    assert _state(alice) == before


def test_reindex_with_another_embedder_is_refused_while_others_have_vectors(
    alice: recalld.MemoryEngine, open_as: Opener
) -> None:
    before = _state(alice)
    bob = open_as("bob", embedder=FakeEmbedder(dimension=16))
    with pytest.raises(recalld.EmbedderMismatchError):
        bob.reindex()
    assert _state(alice) == before


def test_import_and_index_stay_in_the_tenant(alice: recalld.MemoryEngine, open_as: Opener,
                                             tmp_path: Path) -> None:  # fmt: skip
    before = _state(alice)
    bob = open_as("bob")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "I adopted a dog named Rex",'
                          ' "session_id": "b1"}\n', encoding="utf-8")  # fmt: skip
    assert bob.import_transcript(transcript, "jsonl-transcript").stored == 1
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "MEMORY.md").write_text("# Bob\n\n- Bob's boat is called Wave.\n", encoding="utf-8")
    assert len(bob.index([notes]).indexed) == 1
    assert alice.status().sources is None
    found = alice.search("dog named Rex boat Wave", mode="hybrid", limit=50).hits
    assert {h.memory.namespace for h in found} == {"alice"}
    assert _state(alice) == before
    # The same folder indexed by Alice is her own index, not Bob's.
    assert len(alice.index([notes]).indexed) == 1
    assert bob.index([notes]).indexed == ()
    alice.forget([m.id for m in alice.list(types=["chunk"])], hard=True)
    assert {m.content for m in bob.list(types=["chunk"])} != set()


def test_shared_namespaces_are_explicit(open_as: Opener) -> None:
    alice = open_as("alice", shared=("team",))
    bob = open_as("bob", shared=("team",))
    carol = open_as("carol")
    shared = alice.add("The team standup moved to 9:30", namespace="team").id
    private = alice.add("Alice's private note on the standup").id
    assert bob.get(shared).namespace == "team"
    assert [h.memory.id for h in bob.search("standup", mode="hybrid").hits] == [shared]
    with pytest.raises(NotFoundError):
        bob.get(private)
    with pytest.raises(NotFoundError):
        carol.get(shared)
    assert carol.search("standup", mode="hybrid").hits == ()
    assert bob.update(shared, content="The team standup moved to 10:00").namespace == "team"
    assert alice.get(shared).content == "The team standup moved to 10:00"
    with pytest.raises(InvalidInputError, match="not granted"):
        carol.add("sneaking into the team", namespace="team")
    with pytest.raises(InvalidInputError, match="not granted"):
        alice.update(private, namespace="bob")
    assert carol.list() == [] and alice.get(private).namespace == "alice"


@pytest.mark.parametrize("name", ["", " ", "a b", "-x", "x" * 129, "ünï"])
def test_bad_tenant_names_are_refused(open_as: Opener, name: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid tenant"):
        open_as(name)
    with pytest.raises(InvalidInputError, match="invalid tenant"):
        open_as("alice", shared=(name,))


def test_the_default_tenant_is_todays_store(open_as: Opener) -> None:
    plain = open_as()
    memory_id = plain.add("one store, one user").id
    assert plain.get(memory_id).namespace == "default"
    assert open_as("default").get(memory_id).content == "one store, one user"
    with pytest.raises(NotFoundError):
        open_as("alice").get(memory_id)


def test_a_tenant_outnumbered_in_the_word_index_still_finds_its_matches(open_as: Opener) -> None:
    from recalld.stores.base import CandidateRequest

    bob = open_as("bob")
    bob.add_many([f"kayak kayak kayak trip number {i}" for i in range(60)], dedupe=False)
    alice = open_as("alice")
    mine = {alice.add("a kayak I might buy").id, alice.add("the kayak club meets").id}
    found = alice.store.candidates(CandidateRequest(asks={"bm25": WordsAsk(2, ("kayak",))}))
    assert {c.memory_id for c in found["bm25"]} == mine
    assert {h.memory.id for h in alice.search("kayak", mode="hybrid").hits} == mine


def test_the_tenants_own_memory_wins_over_a_shared_one_with_the_same_id(open_as: Opener) -> None:
    alice = open_as("alice", shared=("team",))
    alice.add("Alice's own note on the release", id="note")
    bob = open_as("bob", shared=("team",))
    bob.add("The team's note on the release", id="note", namespace="team")
    assert [m.content for m in alice.store.get_many(["note"])] == [
        "Alice's own note on the release"
    ]
    own = open_as("alice").store.vectors_for(["note"])["note"]  # her own namespace alone
    team = bob.store.vectors_for(["note"])["note"]
    assert own.tobytes() != team.tobytes()
    assert alice.store.vectors_for(["note"])["note"].tobytes() == own.tobytes()
    assert [m.content for m in bob.store.get_many(["note"])] == ["The team's note on the release"]
