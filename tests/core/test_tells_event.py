"""Memories that tell of an event: the pattern, the flag the store keeps, its migration."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import recalld
from recalld.stores.sqlite import SQLiteStore
from recalld.stores.sqlite.migrations import MIGRATIONS
from recalld.text import only_asks, says_change, states_event

Opener = Callable[..., recalld.MemoryEngine]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I visited the Met today with my colleague.", True),
        ("We adopted a puppy last week.", True),
        ("Oh, I just got back from Lisbon!", True),
        ("I\u2019ve finally finished my thesis.", True),  # a typographic apostrophe
        ("By the way, I also got a crystal chandelier from my aunt.", True),
        ("We picked up the keys to the new flat.", True),
        ("Yesterday was long.", True),  # a recent day alone tells of one
        ("Wow, I had no idea jewelry mattered so much at weddings!", False),  # surprise
        ("We had no idea, so we finally bought a map.", True),  # the later verb tells one
        ("Can you recommend some good hiking trails?", False),
        ("Did I visit Rome before Paris?", False),  # a question about an event tells none
        ("Here are five tips for organising your bathroom cabinets.", False),
        ("Hawaii went quiet.", False),  # an "i" ending a word is not the first person
        ("The last time matters less.", False),  # "last" without a day word
        ("", False),
    ],
)
def test_states_event(text: str, expected: bool) -> None:
    assert states_event(text) is expected


def test_the_store_keeps_the_flag_and_recomputes_it_on_update(open_store: Opener) -> None:
    engine = open_store()
    told = engine.add("I went to the climbing gym yesterday").id
    asked = engine.add("Which climbing gyms are open late?").id
    assert engine.get(told).tells_event is True
    assert engine.get(asked).tells_event is False
    engine.update(told, content="Which shoes suit bouldering?")
    engine.update(asked, content="We finished the bouldering course")
    assert engine.get(told).tells_event is False
    assert engine.get(asked).tells_event is True


def flags_after_upgrade(path: Path, applied: int, rows: dict[str, str]) -> dict[str, bool]:
    """Write ``rows`` into a store left at migration ``applied`` (flagged as events where the
    column exists), open it with this version, and read the flags the upgrade left."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    db.execute("CREATE TABLE migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
               "applied_at REAL NOT NULL)")  # fmt: skip
    for number, name, step in MIGRATIONS[:applied]:
        step(db)
        db.execute("INSERT INTO migrations VALUES (?, ?, 0)", (number, name))
    db.execute("INSERT INTO meta VALUES ('app', 'recalld')")
    flag = ", tells_event" if applied >= 5 else ""
    for memory_id, content in rows.items():
        db.execute(
            "INSERT INTO memories (id, content, type, content_hash, created_at, updated_at,"
            f" ref_time{flag}) VALUES (?, ?, 'event', ?, 0, 0, 0{', 1' if flag else ''})",
            (memory_id, content, memory_id),
        )
    db.execute("COMMIT")
    db.close()
    store = SQLiteStore(path)
    try:
        assert store.stats().schema_version == MIGRATIONS[-1][0]
        return {m.id: bool(m.tells_event) for m in store.get_many(list(rows))}
    finally:
        store.close()


def test_m005_computes_the_flag_for_stored_memories(tmp_path: Path) -> None:
    rows = {"e": "I bought a kayak today", "q": "Any kayak tips?"}
    assert flags_after_upgrade(tmp_path / "v4.db", 4, rows) == {"e": True, "q": False}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Which climbing gyms are open late?", True),
        ("Wow, I had no idea! Do the different types carry any meaning?", True),
        ("Can you recommend some good hiking trails?  ", True),  # trailing space
        ("My gym closes at 9. Which ones are open late?", False),  # says something of mine
        ("I’m a nurse on night shifts, which gyms open late?", False),
        ("I've been training for a marathon, any tips?", False),
        ("I went to the gym yesterday, was that too soon?", False),  # tells of an event
        ("I went to the gym.", False),  # not a question
        ("Which gyms? I never go.", False),  # does not end asking
    ],
)
def test_only_asks(text: str, expected: bool) -> None:
    assert only_asks(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The group ride is moving: from next week it's Thursdays at 18:00.", True),
        ("Free delivery now starts at £35 (was £25).", True),
        ("Bumped the Stripe SDK to 24.2.0.", True),
        ("Resus course cancelled. Rebooked for 28 April.", True),
        ("Die Fortbildung ist verschoben auf den 18. März.", True),
        ("レッスンの曜日が変わります。", True),
        ("Switched the integration tests to testcontainers-go. No more compose step.", True),
        ("Ilse becomes our EM, so I report to Ilse from today.", True),
        ("Kofi moves over to lead Analytics Engineering.", True),
        ("The standup got moved to 9:30.", True),
        ("Barren edge has moved roughly 5 m north since last spring.", False),  # a place
        ("The group ride is on Wednesdays at 18:30.", False),
        ("I like swift-format with 4-space indents.", False),
    ],
)
def test_says_change(text: str, expected: bool) -> None:
    assert says_change(text) is expected


def test_only_asks_trusts_the_flag_it_is_given() -> None:
    question = "Which climbing gyms are open late?"
    assert only_asks(question, tells_event=True) is False
    assert only_asks("I went to the gym yesterday, was that too soon?", tells_event=False)


def test_m006_recomputes_the_flag_of_memories_that_say_no_idea(tmp_path: Path) -> None:
    rows = {
        "idea": "Wow, I had No Idea that jewelry mattered so much!",
        "both": "I had no idea, so I bought a map",
        "kept": "We had dinner at Mesa",
    }
    flags = flags_after_upgrade(tmp_path / "v5.db", 5, rows)
    assert flags == {"idea": False, "both": True, "kept": True}
