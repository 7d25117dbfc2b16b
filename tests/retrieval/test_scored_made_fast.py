"""A candidate remade by a stage (adjust.make_scored) is the Scored the dataclass would make."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from recalld.records import Memory
from recalld.retrieval.adjust import Scored, make_scored
from recalld.retrieval.fusion import Fused

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_scored_is_the_dataclass_made_the_usual_way() -> None:
    memory = Memory(
        id="a", content="x", type="fact", content_hash="h", created_at=NOW, updated_at=NOW
    )
    fused = Fused("a", 0.5, {"bm25": 0.5})
    fast = make_scored(memory, fused, 0.75, {"decay": 1.5})
    usual = Scored(memory, fused, 0.75, {"decay": 1.5})
    assert fast == usual and hash(fast.promises) == hash(usual.promises)
    # every field set, none more: a field added to Scored must be added to make_scored()
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(Scored)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.score = 1.0  # type: ignore[misc]
