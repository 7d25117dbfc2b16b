"""The supersede rule on each backend: a replaced memory never ranks above its replacement
(brought in when the search missed it), and a replacement another tenant cannot see is
never brought into its results."""

from __future__ import annotations

from tests.contract.conftest import Opener

OLD = "the staging redis port is 6379 on the staging host"
NEW = "redis moved: now 6380"
QUESTION = "staging host port"


def test_a_replaced_memory_never_ranks_above_its_replacement(open_as: Opener) -> None:
    engine = open_as()
    old = engine.add(OLD, id="old").id
    engine.add("an unrelated note about lunch", id="other")
    new = engine.add(NEW, id="new").id
    before = [h.memory.id for h in engine.search(QUESTION, mode="hybrid").hits]
    assert before.index(old) < before.index(new)
    engine.supersede(old, by=new)
    hits = engine.search(QUESTION, mode="hybrid", explain=True).hits
    found = [h.memory.id for h in hits]
    assert found[:2] == [new, old], found
    assert hits[0].trace is not None and hits[0].trace.promises
    # Filtered to the replaced memory's own tag, the search does not find the replacement
    # by itself: the replaced memory's place is its replacement's when it passes the filters.
    engine.update(old, tags=["infra"])
    engine.update(new, tags=["infra"])
    engine.add("the staging host is rebooted on Sundays", id="x", tags=["infra"])
    tagged = [h.memory.id for h in engine.search(QUESTION, mode="hybrid", tags=["infra"]).hits]
    assert tagged.index(new) < tagged.index(old)


def test_a_replacement_another_tenant_cannot_see_is_never_brought_in(open_as: Opener) -> None:
    alice = open_as(tenant="alice", shared=("team",))
    bob = open_as(tenant="bob", shared=("team",))
    shared = alice.add(OLD, namespace="team").id
    private = alice.add(NEW).id
    alice.supersede(shared, by=private)
    assert [h.memory.id for h in alice.search(QUESTION, mode="hybrid").hits][:2] == [
        private, shared]  # fmt: skip
    seen = bob.search(QUESTION, mode="hybrid", explain=True).hits
    assert [h.memory.id for h in seen] == [shared]
    assert seen[0].trace is not None and "demoted only" in seen[0].trace.promises[0]
    assert NEW not in bob.context(QUESTION).text
