"""A filter of a thousand tags is answered (a memory must carry every one), never reported as
a store failure: past a few tags the SQLite store puts them in one clause, since a chain of
999 clauses passed SQLite's expression depth and the search failed with "check the free
disk space"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from recalld.records import Memory, MemoryFilter
from recalld.stores.base import CandidateRequest, WordsAsk
from recalld.stores.sqlite import SQLiteStore, queries
from recalld.text import content_hash

NOW = datetime(2026, 11, 1, tzinfo=UTC)
MANY = [f"tag{i:04d}" for i in range(1200)]


def memory(i: int, text: str, tags: list[str]) -> Memory:
    return Memory(id=f"m{i}", content=text, content_hash=content_hash(text), type="fact",
                  created_at=NOW, updated_at=NOW, tags=tuple(tags))  # fmt: skip


@pytest.mark.parametrize("count", [1, queries.TAG_CLAUSES_MAX, queries.TAG_CLAUSES_MAX + 1,
                                   999, 1200])  # fmt: skip
def test_a_filter_of_many_tags_keeps_the_memories_that_carry_them_all(
    tmp_path: Path, count: int
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.insert([memory(1, "kayak trip with every tag", MANY),
                  memory(2, "kayak trip with all but one", MANY[1:]),
                  memory(3, "kayak trip with none", [])], None)  # fmt: skip
    wanted = MemoryFilter(tags=tuple(MANY[:count]) + (MANY[0],))  # (a repeat counts once)
    assert [m.id for m in store.list(wanted, limit=10)] == ["m1"]
    found = store.candidates(
        CandidateRequest(filters=wanted, asks={"bm25": WordsAsk(10, ("kayak",))})
    )
    assert [c.memory_id for c in found["bm25"]] == ["m1"]
    missing = MemoryFilter(tags=(*MANY[1:count], "absent"))
    assert store.list(missing, limit=10) == []
    store.close()
