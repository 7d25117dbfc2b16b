"""Current facts first, end to end: the README's demo store with the packaged model."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import recalld
from recalld.io import read_memories_jsonl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_conversation.jsonl"
AS_OF = datetime(2026, 4, 20, tzinfo=UTC)


def test_the_demo_answers_with_the_new_date_first(engine: recalld.MemoryEngine) -> None:
    with EXAMPLE.open(encoding="utf-8") as stream:
        items, problems = read_memories_jsonl(stream)
    assert not problems
    engine.add_many(items)
    hits = engine.search("when does my sister arrive?", limit=6, as_of=AS_OF, explain=True).hits
    assert "April 14th" in hits[0].memory.content
    stale = next(h for h in hits if "April 12th" in h.memory.content)
    assert stale.trace is not None and stale.trace.adjustments["superseded"] < 1.0
    # Asked in the past tense, the first date is not treated as stale.
    asked = engine.search("when was my sister going to arrive?", limit=5, as_of=AS_OF,
                          explain=True)  # fmt: skip
    first = next(h for h in asked.hits if "April 12th" in h.memory.content)
    assert first.trace is not None and "superseded" not in first.trace.adjustments
    # A question that counts across sessions needs the old value as much as the new one.
    counted = engine.search("how many arrival dates does my sister have?", limit=6, as_of=AS_OF,
                            explain=True)  # fmt: skip
    assert all(h.trace is not None and "superseded" not in h.trace.adjustments
               for h in counted.hits)  # fmt: skip
    assert any("April 12th" in h.memory.content for h in counted.hits)
