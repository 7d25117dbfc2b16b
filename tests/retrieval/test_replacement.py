"""Inferred knowledge updates only between statements that can replace each other: not the
parts of one document, not ordered by ingestion alone, and not on a version number; each
pair that stands aside is named in the search's trace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder
from recalld.records import Memory, NewMemory, Source
from recalld.retrieval.adjust import Scored, knowledge_updates
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused
from recalld.retrieval.replacement import (
    NO_TIME,
    SAME_DOCUMENT,
    gives_new_value,
    in_order,
    without_versions,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)
BASE = RetrievalConfig()
SAME = np.array([1.0, 0.0, 0.0], dtype=np.float32)


def mem(mid: str, content: str, days_old: float = 0.0, *, dated: bool = True,
        **fields: object) -> Memory:  # fmt: skip
    when = NOW - timedelta(days=days_old)
    return Memory(id=mid, content=content, type=fields.pop("type", "insight"),  # type: ignore[arg-type]
                  created_at=when, updated_at=when, content_hash=mid,
                  event_time=when if dated else None, **fields)  # type: ignore[arg-type]  # fmt: skip


def chunk(mid: str, content: str, path: str, days_old: float) -> Memory:
    """A chunk of an indexed file: no event time, stored at its indexing."""
    return mem(mid, content, days_old, dated=False, type="chunk", evergreen=True,
               source=Source("file", path, 1, 5))  # fmt: skip


def ranked(*memories: Memory) -> list[Scored]:
    return [Scored(m, Fused(m.id, 1.0 - i / 10, {}), 1.0 - i / 10) for i, m in enumerate(memories)]


def updated(items: list[Scored]) -> tuple[dict[str, float], dict[str, str]]:
    aside: dict[str, str] = {}
    vectors = {s.memory.id: SAME for s in items}  # restatements: cosine 1
    out = knowledge_updates(items, vectors, BASE, NOW, True, {}, aside=aside)
    return {s.memory.id: s.factors.get("superseded", 1.0) for s in out}, aside


def test_two_chunks_of_one_page_never_replace_each_other() -> None:
    a = chunk("a", "Install with pip install tool", "/docs/install.md", days_old=2)
    b = chunk("b", "Install with pip install tool", "/docs/install.md", days_old=1)
    assert in_order(a, b) == SAME_DOCUMENT
    factors, aside = updated(ranked(a, b))
    assert factors == {"a": 1.0, "b": 1.0}
    assert aside["knowledge_updates"] == (
        "1 pair of alike candidates left as they are: 1 parts of one document"
    )


def test_chunks_of_two_pages_ordered_only_by_indexing_stand_aside() -> None:
    a = chunk("a", "Configure the theme in config.toml", "/docs/a.md", days_old=0.001)
    b = chunk("b", "Configure the theme in config.toml", "/docs/b.md", days_old=0.0)
    assert in_order(a, b) == NO_TIME
    factors, aside = updated(ranked(a, b))
    assert set(factors.values()) == {1.0} and NO_TIME in aside["knowledge_updates"]


def test_a_dated_page_is_newer_than_an_older_dated_page() -> None:
    """Daily notes (``memory/2026-05-01.md``) carry their day as event time: a real time."""
    a = mem("a", "Standup is at 9:30 in room B", 30, type="chunk",
            source=Source("file", "/w/memory/2026-05-01.md", 1, 2))  # fmt: skip
    b = mem("b", "Standup is at 9:30 in room B", 1, type="chunk",
            source=Source("file", "/w/memory/2026-05-30.md", 1, 2))  # fmt: skip
    factors, _ = updated(ranked(a, b))
    assert factors == {"a": BASE.updates.kupdate_factor, "b": 1.0}


def test_notes_added_directly_keep_their_storage_time() -> None:
    old = mem("old", "The standup is in room B", 10, dated=False)
    new = mem("new", "The standup is in room B", 1, dated=False)
    factors, aside = updated(ranked(old, new))
    assert factors == {"old": BASE.updates.kupdate_factor, "new": 1.0} and not aside


def test_an_import_without_event_times_is_not_ordered_by_ingestion() -> None:
    old = mem("old", "The standup is in room B", 10, dated=False, source=Source("beir"))
    new = mem("new", "The standup is in room B", 1, dated=False, source=Source("beir"))
    factors, aside = updated(ranked(old, new))
    assert set(factors.values()) == {1.0} and NO_TIME in aside["knowledge_updates"]


def test_anyone_in_a_channel_may_move_what_another_announced() -> None:
    a = mem("a", "Sprint demo is every other Thursday at 15:00", 60, metadata={"speaker": "Kofi"})
    b = mem("b", "Sprint demo moves to Fridays at 11:00", 1, metadata={"speaker": "Ilse"})
    assert in_order(a, b) == (a, b)
    factors, _ = updated(ranked(a, b))
    assert factors == {"a": BASE.updates.kupdate_factor, "b": 1.0}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Changed in v9.0.0: the flag is gone", False),
        ("The minimum is now ruff==0.3.0", False),
        ("Python 3.12 is now the default interpreter", False),
        ("Upgraded the SDK to 24.2.0", False),
        ("bumped the SDK to 24.2", True),  # a value after "to" is the new value
        ("free delivery now starts at £35", True),
        ("the review moved to 12.03.2026", True),  # a date written with dots
        ("Changed the slider step from 0.5 to 0.1", True),
    ],
)
def test_a_version_number_is_not_a_new_value(text: str, value: bool) -> None:
    assert gives_new_value(text) is value


def test_without_versions_keeps_the_other_words() -> None:
    assert without_versions("requires ruff==0.3.0 and v9 now").split() == ["requires", "and",
                                                                            "now"]  # fmt: skip


def test_a_change_that_names_only_a_version_stands_aside_in_the_trace() -> None:
    old = mem("old", "The linter is configured in pyproject", 10)
    new = mem("new", "Changed in v9.0.0: the linter is configured in pyproject", 1)
    vectors = {"old": SAME, "new": np.array([0.6, 0.8, 0.0], dtype=np.float32)}
    aside: dict[str, str] = {}
    config = BASE.with_changes(kupdate_change_similarity=0.5)
    out = knowledge_updates(ranked(old, new), vectors, config, NOW, True, {}, aside=aside)
    assert all("superseded" not in s.factors for s in out)
    assert "the new value is only a version number" in aside["knowledge_updates"]


def test_an_indexed_folder_keeps_its_earlier_pages_whole(tmp_path: Path) -> None:
    """Through `recalld index`: two pages that say nearly the same thing, indexed one after
    the other; the first is not demoted as an older statement of the second."""
    docs = tmp_path / "docs"
    docs.mkdir()
    text = "# Themes\n\nSet the colour theme with the theme key in config.toml.\n"
    (docs / "a.md").write_text(text)
    (docs / "b.md").write_text(text.replace("colour", "color"))
    settings = Settings.model_construct(db=tmp_path / "m.db", cache_dir=tmp_path / "c")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.index([docs], globs=["**/*.md"])
        engine.add_many([NewMemory("an unrelated note about lunch")])
        result = engine.search("colour theme config.toml", explain=True)
    factors = [h.trace.adjustments.get("superseded", 1.0) for h in result.hits if h.trace]
    assert factors and set(factors) == {1.0}
    assert NO_TIME in result.details["stood_aside"]["knowledge_updates"]


def alike(cosine: float) -> np.ndarray:
    """A unit vector whose cosine to ``SAME`` is ``cosine`` rounded to float32, exactly."""
    return np.array([cosine, np.sqrt(1.0 - cosine**2), 0.0], dtype=np.float32)


@pytest.mark.parametrize("above", [0.0, 1e-12])
def test_a_pair_at_the_least_threshold_is_weighed_and_one_below_it_is_not(above: float) -> None:
    """Pairs less alike than every threshold are skipped before they are weighed (they
    could never count): the cut is the thresholds' own, the boundary included."""
    cosine = float(np.float32(0.4))  # what the product of the two vectors gives
    old = mem("old", "The standup is at 9:30 in room B", 2)
    new = mem("new", "The standup moved to 10:00 on Thursday", 1)
    vectors = {"old": SAME, "new": alike(0.4)}
    config = BASE.with_changes(kupdate_related_similarity=cosine + above)
    cosines = {"old": 0.5, "new": 0.5}  # as good an answer to the query: related suffices
    out = knowledge_updates(ranked(old, new), vectors, config, NOW, True, cosines)
    factors = {s.memory.id: s.factors.get("superseded", 1.0) for s in out}
    assert factors["old"] == (BASE.updates.kupdate_factor if above == 0.0 else 1.0)
    assert factors["new"] == 1.0
