"""What a user states is a rule, not a factor: the promise stage on hand-made candidates.

A memory replaced by another never ranks above the memory that now holds its fact, however
far ahead its own evidence puts it; the replacement is brought in when the search missed it;
a forgotten memory is never a result; and the context block marks a replaced fact with what
replaced it. (The same through every door on a real store: tests/interfaces/test_promises_doors.py.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta

import pytest

from recalld.records import Memory, MemoryFilter
from recalld.retrieval.adjust import Scored
from recalld.retrieval.context_block import context_line
from recalld.retrieval.promises import keep_promises, promised_order
from tests.retrieval.test_stages import BASE, NOW, mem, scored


def lookup_of(*memories: Memory):  # type: ignore[no-untyped-def]
    known = {m.id: m for m in memories}

    def lookup(ids: list[str]) -> Mapping[str, Memory]:
        return {i: known[i] for i in ids if i in known}

    return lookup


def ids(items: list[Scored]) -> list[str]:
    return [s.memory.id for s in items]


OLD = mem("old", "I live in Lisbon, in the Alfama district.", days_old=30, superseded_by="new")
NEW = mem("new", "I moved from Lisbon to Porto last month.", days_old=1)
CELLO = mem("cello", "My sister plays the cello.", days_old=2)


def test_a_replaced_memory_never_ranks_above_its_replacement() -> None:
    # Its own evidence is more than twice the replacement's: a factor of 0.5 kept it first.
    items = [scored(OLD, 0.1156), scored(CELLO, 0.06), scored(NEW, 0.0523)]
    kept = keep_promises(items, lookup_of(OLD, NEW, CELLO), MemoryFilter(), NOW, BASE)
    assert ids(kept.scored) == ["new", "cello", "old"]
    new, old = kept.scored[0], kept.scored[2]
    # The replacement takes the place the replaced memory had; the replaced one goes under.
    assert new.score == pytest.approx(0.1156) and old.score < new.score
    assert new.factors["in_place_of_replaced"] == pytest.approx(0.1156 / 0.0523)
    assert old.factors["superseded"] == BASE.promises.superseded_factor
    assert "old" in new.promises[0] and "never ranked above" in old.promises[0]
    assert kept.successors == {"old": "new"}
    # However small the factor is set, the rule is the same: and with a factor of 1.0 too.
    for factor in (1.0, 0.9, 0.01):
        again = keep_promises(items, lookup_of(OLD, NEW), MemoryFilter(), NOW,
                              BASE.with_changes(superseded_factor=factor))  # fmt: skip
        assert ids(again.scored).index("new") < ids(again.scored).index("old")


def test_the_replacement_is_brought_in_when_the_search_missed_it() -> None:
    items = [scored(OLD, 0.9), scored(CELLO, 0.4)]
    kept = keep_promises(items, lookup_of(OLD, NEW, CELLO), MemoryFilter(), NOW, BASE)
    assert ids(kept.scored) == ["new", "old", "cello"]
    brought = kept.scored[0]
    assert brought.score == 0.9 and brought.fused.contributions == {"in_place_of:old": 0.9}
    assert brought.promises[0].startswith("brought in")
    # With "hide" the replaced memory is left out, and its replacement stands in its place.
    hidden = keep_promises(items, lookup_of(OLD, NEW), MemoryFilter(), NOW,
                           BASE.with_changes(superseded="hide"))  # fmt: skip
    assert ids(hidden.scored) == ["new", "cello"] and hidden.successors == {}


def test_the_current_successor_ends_the_chain_and_must_be_visible() -> None:
    middle = replace(NEW, superseded_by="newest")
    newest = mem("newest", "I moved from Porto to Braga.", days_old=0)
    items = [scored(OLD, 0.9), scored(middle, 0.8), scored(CELLO, 0.5)]
    kept = keep_promises(items, lookup_of(OLD, middle, newest), MemoryFilter(), NOW, BASE)
    assert ids(kept.scored)[0] == "newest" and kept.successors == {"old": "newest",
                                                                   "new": "newest"}  # fmt: skip
    # A replacement that is forgotten, outside the filters, unknown, or in a loop: nothing to
    # put above; the replaced memory is only demoted, and the trace says why.
    forgotten = replace(NEW, forgotten_at=NOW)
    other = replace(NEW, project="elsewhere")
    loop = replace(NEW, superseded_by="old")
    cases = [(lookup_of(OLD, forgotten), MemoryFilter()),
             (lookup_of(OLD, other), MemoryFilter(project=None, tags=("home",))),
             (lookup_of(OLD), MemoryFilter()), (lookup_of(OLD, loop), MemoryFilter())]  # fmt: skip
    for lookup, filters in cases:
        alone = keep_promises([scored(OLD, 0.9), scored(CELLO, 0.5)], lookup, filters, NOW, BASE)
        assert ids(alone.scored) == ["cello", "old"] and alone.successors == {}
        assert "demoted only" in alone.scored[1].promises[0]


def test_past_its_valid_until_a_memory_is_no_longer_current() -> None:
    expired = mem("exp", "Office closed this week", days_old=10,
                  valid_until=NOW - timedelta(days=2))  # fmt: skip
    later = mem("later", "Parking permit valid", days_old=10, valid_until=NOW + timedelta(days=2))
    items = [scored(expired, 0.9), scored(later, 0.7)]
    kept = keep_promises(items, lookup_of(), MemoryFilter(), NOW, BASE)
    assert ids(kept.scored) == ["later", "exp"] and "no longer current since" in (
        kept.scored[1].promises[0])  # fmt: skip
    # Before its end of validity (a search as of an earlier time) it is current.
    earlier = keep_promises(items, lookup_of(), MemoryFilter(), NOW - timedelta(days=5), BASE)
    assert earlier.scored == items
    hidden = keep_promises(items, lookup_of(), MemoryFilter(), NOW,
                           BASE.with_changes(superseded="hide"))  # fmt: skip
    assert ids(hidden.scored) == ["later"]
    with pytest.raises(ValueError, match="superseded"):
        BASE.with_changes(superseded="drop")


def test_a_forgotten_memory_is_never_a_result() -> None:
    gone = mem("gone", "the old wifi password", forgotten_at=NOW)
    kept = keep_promises([scored(gone, 1.0), scored(CELLO, 0.5)], lookup_of(), MemoryFilter(),
                         NOW, BASE)  # fmt: skip
    assert ids(kept.scored) == ["cello"]
    asked = MemoryFilter(include_forgotten=True)
    assert ids(keep_promises([scored(gone, 1.0)], lookup_of(), asked, NOW, BASE).scored) == [
        "gone"]  # fmt: skip


def test_diversity_never_puts_a_replaced_memory_first() -> None:
    new, old, cello = scored(NEW, 0.9), scored(OLD, 0.8), scored(CELLO, 0.5)
    successors = {"old": "new"}
    # MMR picked the replaced memory before its replacement: it moves under it.
    assert ids(promised_order([old, cello, new], [new, old, cello], successors, 3)) == [
        "cello", "new", "old"]  # fmt: skip
    # MMR passed the replacement over: it comes back just above, within the limit.
    assert ids(promised_order([cello, old], [new, old, cello], successors, 2)) == ["cello", "new"]
    assert ids(promised_order([old, cello], [new, old, cello], successors, 3)) == [
        "new", "old", "cello"]  # fmt: skip


def test_the_context_line_of_a_replaced_fact_says_what_replaced_it_and_when() -> None:
    line = context_line(OLD, NEW, NOW)
    assert line == (f'- ({OLD.event_time:%Y-%m-%d}) [replaced on {NEW.event_time:%Y-%m-%d} by: '
                    f'"{NEW.content}"] {OLD.content}')  # fmt: skip
    assert context_line(NEW, None, NOW) == f"- ({NEW.event_time:%Y-%m-%d}) {NEW.content}"
    assert "[replaced: no longer current]" in context_line(OLD, None, NOW)
    expired = replace(CELLO, valid_until=NOW - timedelta(days=1))
    assert f"[no longer current since {expired.valid_until:%Y-%m-%d}]" in context_line(
        expired, None, NOW)  # fmt: skip
    long = replace(NEW, content="x" * 500)
    assert len(context_line(OLD, long, NOW)) < len(OLD.content) + 200


# -- the invariant on a real store, over many searches ---------------------------------------

WORDS = ("deploy", "staging", "redis", "port", "backup", "garden", "tea", "coffee", "flight",
         "sister", "Porto", "Lisbon", "meeting", "invoice", "cello", "tyres", "winter",
         "kestrel", "launch", "database")  # fmt: skip


def test_every_search_keeps_every_supersede(tmp_path: object) -> None:
    """Random notes, random chains of replacements, random questions: in every result (any
    limit, with diversity on or off) a replaced memory comes after its current successor,
    and every context line of a replaced memory is marked."""
    import random
    from pathlib import Path

    import recalld
    from recalld.config import Settings
    from recalld.providers.embedders import FakeEmbedder

    rng = random.Random(43)
    folder = Path(str(tmp_path))
    with recalld.open(settings=Settings(db=folder / "m.db", cache_dir=None),
                      embedder=FakeEmbedder()) as engine:  # fmt: skip
        ids = [engine.add(" ".join(rng.sample(WORDS, 5)) + f" note {i}").id for i in range(40)]
        successor: dict[str, str] = {}
        for old, new in zip(ids[:12], ids[12:24], strict=True):
            engine.supersede(old, by=new)
            successor[old] = new
        for old, new in zip(ids[12:16], ids[24:28], strict=True):  # chains of two
            engine.supersede(old, by=new)
            successor[old] = new
        engine.forget(ids[20])  # a forgotten successor: its replaced memory has none

        def current(memory_id: str) -> str | None:
            seen = memory_id
            while seen in successor:
                seen = successor[seen]
            return None if seen == ids[20] else seen

        configs = [engine.config, engine.config.with_changes(mmr_lambda=0.5),
                   engine.config.with_changes(superseded_factor=1.0)]  # fmt: skip
        for round_ in range(30):
            query = " ".join(rng.sample(WORDS, 2))
            config = configs[round_ % len(configs)]
            limit = rng.choice((1, 3, 5, 10))
            found = [h.memory.id for h in engine.search(query, limit=limit, config=config).hits]
            for position, memory_id in enumerate(found):
                head = current(memory_id)
                if memory_id in successor and head is not None:
                    assert head in found[:position], (query, limit, memory_id, found)
            assert ids[20] not in found
            block = engine.context(query, max_tokens=400, config=config)
            for hit in block.hits:
                if hit.memory.id in successor:
                    line = next(x for x in block.text.splitlines() if hit.memory.content in x)
                    assert "[replaced" in line, line
