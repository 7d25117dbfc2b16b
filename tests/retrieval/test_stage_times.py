"""Each stage's milliseconds of a search, measured in the search itself (recalld.timing):
given with ``explain``, they add up to no more than the search's own time."""

from __future__ import annotations

import pytest

import recalld
from recalld.interfaces.render import print_search
from recalld.timing import StageClock, clocked, timed

STAGES = {"understand", "embed", "candidates", "fuse", "rows", "adjust", "neighbors", "updates",
          "filter", "assemble"}  # fmt: skip


def test_an_explained_search_gives_each_stage_and_they_fit_in_its_time(
    fake_engine: recalld.MemoryEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(40):
        fake_engine.add(f"kestrel note {i} about the deploy on day {i}", session_id=f"s{i % 5}")
    for query in ("kestrel deploy", "what happened on day 7?", "notes"):
        result = fake_engine.search(query, limit=5, mode="hybrid", explain=True)
        stage_ms = result.details["stage_ms"]
        assert set(stage_ms) >= STAGES, stage_ms
        assert all(ms >= 0 for ms in stage_ms.values())
        assert stage_ms["embed"] > 0 and stage_ms["candidates"] > 0
        assert sum(stage_ms.values()) <= result.took_ms + 1e-3
        plain = fake_engine.search(query, limit=5, mode="hybrid")
        assert "stage_ms" not in plain.details
        assert [h.memory.id for h in plain.hits] == [h.memory.id for h in result.hits]
    print_search(result, explain=True)
    shown = capsys.readouterr().out
    assert "stages: understand" in shown and "embed" in shown and " ms" in shown


def test_time_spent_inside_a_stage_is_taken_out_of_it() -> None:
    """A stage timed apart inside another (the embedding inside reading the candidates) is
    not counted twice; nested blocks of it count once; with no clock, nothing is timed."""
    with timed("embed"):
        pass  # no search running: nothing to record
    with clocked() as clock:
        with timed("embed"), timed("embed"):
            sum(range(20_000))
        clock.lap("candidates")
    assert set(clock.ms) == {"embed", "candidates"}
    assert clock.ms["embed"] > 0 and clock.ms["candidates"] >= 0
    lone = StageClock()
    lone.lap("a")
    lone.lap("a")
    assert list(lone.rounded()) == ["a"]
