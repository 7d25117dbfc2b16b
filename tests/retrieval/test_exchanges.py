"""Knowledge updates across exchanges and threads: a change replaces both turns of the
exchange that stated the old fact (a statement and the reply that confirms it), and in one
thread of messages a related later change is on the older turn's subject."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from recalld.records import Memory, Source
from recalld.retrieval.adjust import Scored, knowledge_updates
from recalld.retrieval.config import RetrievalConfig
from recalld.retrieval.fusion import Fused
from recalld.retrieval.replacement import one_exchange

NOW = datetime(2026, 6, 1, tzinfo=UTC)
BASE = RetrievalConfig()
EXCHANGES = BASE.with_changes(kupdate_exchange_minutes=10)
PAIRS_ONLY = BASE.with_changes(kupdate_exchange_minutes=0)


def turn(mid: str, content: str, when: datetime, role: str, session: str) -> Memory:
    return Memory(id=mid, content=content, type="turn", created_at=when, updated_at=when,
                  content_hash=mid, event_time=when, session_id=session,
                  source=Source("direct"), metadata={"role": role})  # fmt: skip


def unit(*parts: float) -> np.ndarray:
    v = np.array(parts, dtype=np.float32)
    return v / np.linalg.norm(v)


def ranked(*memories: Memory) -> list[Scored]:
    return [Scored(m, Fused(m.id, 1.0 - i / 10, {}), 1.0 - i / 10) for i, m in enumerate(memories)]


def superseded(
    items: list[Scored], vectors: dict[str, np.ndarray], config: RetrievalConfig,
    cosines: dict[str, float] | None = None,
) -> set[str]:  # fmt: skip
    out = knowledge_updates(items, vectors, config, NOW, True, cosines or {})
    return {s.memory.id for s in out if "superseded" in s.factors}


T0 = NOW - timedelta(days=40)
STATED = turn("stated", "the standup moves to 9:30", T0, "user", "s1")
CONFIRMED = turn("confirmed", "Noted: standup at 9:30 from Monday", T0 + timedelta(
    minutes=1), "assistant", "s1")  # fmt: skip
CHANGED = turn("changed", "the standup is now at 10:15",
               NOW - timedelta(days=2), "assistant", "s2")  # fmt: skip
# The change is close to the confirmation (0.8) and only related to the statement (0.4),
# which the confirmation is related to (0.6).
VECTORS = {
    "stated": unit(0.6, -0.133, 0.789),
    "confirmed": unit(1.0, 0.0, 0.0),
    "changed": unit(0.8, 0.6, 0.0),
}


def test_one_exchange_is_two_speakers_of_one_session_within_the_span() -> None:
    span = timedelta(minutes=10)
    assert one_exchange(STATED, CONFIRMED, span)
    assert not one_exchange(STATED, CONFIRMED, timedelta(0))  # turned off
    later = turn("later", "x", T0 + timedelta(hours=2), "assistant", "s1")
    assert not one_exchange(STATED, later, span)
    same_speaker = turn("again", "x", T0 + timedelta(minutes=1), "user", "s1")
    assert not one_exchange(STATED, same_speaker, span)
    other_session = turn("other", "x", T0 + timedelta(minutes=1), "assistant", "s9")
    assert not one_exchange(STATED, other_session, span)


def test_a_change_replaces_both_turns_of_the_exchange_it_changes() -> None:
    items = ranked(STATED, CHANGED, CONFIRMED)
    assert superseded(items, VECTORS, PAIRS_ONLY) == {"confirmed"}
    assert superseded(items, VECTORS, EXCHANGES) == {"confirmed", "stated"}


def test_a_turn_between_them_makes_the_two_no_exchange() -> None:
    """The statement's reply is the next turn of its session: a turn two places away
    answers something else."""
    between = turn("between", "how do I run the tests?", T0 + timedelta(seconds=30), "assistant",
                   "s1")  # fmt: skip
    vectors = {**VECTORS, "between": unit(0.0, 0.0, 1.0)}
    items = ranked(STATED, CHANGED, CONFIRMED, between)
    assert superseded(items, vectors, EXCHANGES) == {"confirmed"}


def test_a_turn_unrelated_to_the_change_is_left_as_it_is() -> None:
    vectors = {**VECTORS, "stated": unit(0.6, -0.8, 0.0)}  # related to the reply, not the change
    assert superseded(ranked(STATED, CHANGED, CONFIRMED), vectors, EXCHANGES) == {"confirmed"}


def test_a_later_change_in_one_thread_is_on_its_subject() -> None:
    """An order's thread: the booking, then weeks later a change that shares few words with
    it and answers the query less well than the booking does."""
    booked = turn("booked", "Booked as order AB-7: walnut frame, delivery Saturday 2 May",
                  T0, "Nell", "t-7")  # fmt: skip
    switched = turn("switched", "switched to an oak frame, same 9am slot",
                    NOW - timedelta(days=5), "Nell", "t-7")  # fmt: skip
    vectors = {"booked": unit(1.0, 0.0), "switched": unit(0.4, 0.92)}  # cosine 0.4: related
    cosines = {"booked": 0.7, "switched": 0.3}
    items = ranked(booked, switched)
    assert superseded(items, vectors, BASE, cosines) == set()
    threads = BASE.with_changes(kupdate_thread_subject=True)
    assert not BASE.updates.kupdate_thread_subject
    assert superseded(items, vectors, threads, cosines) == {"booked"}
    apart = turn("switched", switched.content, switched.event_time or NOW, "Nell", "t-8")
    assert superseded(ranked(booked, apart), vectors, threads, cosines) == set()


def test_a_change_is_not_replaced_by_the_reply_that_confirms_it() -> None:
    """The user says the date changed, the assistant confirms it a minute later: the
    confirmation replaces the old date, not the change it confirms."""
    old = turn("old", "The dentist is on the 4th at 10", T0, "user", "s1")
    change = turn("change", "The dentist on the 4th is cancelled; the new date is now the 25th",
                  NOW - timedelta(days=3), "user", "s2")  # fmt: skip
    reply = turn("reply", "Changed: new date the 25th at 10",
                 NOW - timedelta(days=3) + timedelta(minutes=1), "assistant", "s2")  # fmt: skip
    vectors = {"old": unit(1.0, 0.0), "change": unit(0.45, 0.89), "reply": unit(0.6, 0.8)}
    items = ranked(old, change, reply)
    assert superseded(items, vectors, PAIRS_ONLY) == {"old", "change"}
    assert superseded(items, vectors, EXCHANGES) == {"old"}


def test_a_question_shares_no_fact_with_its_answer() -> None:
    """A replaced question ("which one do you recommend?") does not take its answer along."""
    asked = turn("asked", "Which plumber do you recommend?", T0, "user", "s1")
    items = ranked(asked, CHANGED, CONFIRMED)
    vectors = {"asked": VECTORS["confirmed"], "confirmed": VECTORS["stated"],
               "changed": VECTORS["changed"]}  # fmt: skip
    aside: dict[str, str] = {}
    knowledge_updates(items, vectors, EXCHANGES, NOW, True, {}, aside=aside)
    assert superseded(items, vectors, EXCHANGES) == {"asked"}
    assert "1 a question and its answer" in aside["knowledge_updates"]
    answered = turn("answered", "Which one? I'd pick Harlow & Sons, they answer on Sundays",
                    T0 + timedelta(minutes=1), "assistant", "s1")  # fmt: skip
    assert superseded(ranked(STATED, CHANGED, answered), {**VECTORS, "answered": VECTORS[
        "confirmed"]}, EXCHANGES) == {"answered", "stated"}  # fmt: skip
