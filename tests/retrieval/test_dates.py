from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from recalld.records import TimeRange
from recalld.retrieval.dates import (
    Anchor,
    anchor_event,
    anchor_window,
    resolve_time_window,
    time_order,
    time_phrases,
)
from recalld.retrieval.query import asks_advice, classify, understand

REF = datetime(2024, 5, 15, 12, 0, tzinfo=UTC)  # a Wednesday


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did I eat yesterday?", "2024-05-14", "2024-05-15"),
        ("what did they tell me the day before yesterday?", "2024-05-13", "2024-05-14"),
        ("was hat er vorgestern gesagt?", "2024-05-13", "2024-05-14"),
        ("what did I do today", "2024-05-15", "2024-05-16"),
        ("where did I go 3 days ago?", "2024-05-11", "2024-05-14"),
        ("what happened two weeks ago", "2024-04-27", "2024-05-06"),
        ("what did I buy in March?", "2024-03-01", "2024-04-01"),
        ("what did I buy in March 2022?", "2022-03-01", "2022-04-01"),
        ("in December what happened", "2023-12-01", "2024-01-01"),
        ("what happened on May 3rd", "2024-05-02", "2024-05-05"),
        ("the trip in 2021", "2021-01-01", "2022-01-01"),
        ("what did Ines say in our January 1:1?", "2024-01-01", "2024-02-01"),  # no "January 1"
        ("notes from the March offsite", "2024-03-01", "2024-04-01"),
        ("what did we decide in the August review", "2023-08-01", "2023-09-01"),
        ("what caused the outage the week before last?", "2024-04-24", "2024-05-08"),
        ("what did we fix just before Christmas?", "2023-12-15", "2023-12-26"),
        ("who came over at Easter", "2024-03-28", "2024-04-04"),  # Easter 2024: 31 March
        ("the party after Halloween", "2023-10-31", "2023-11-10"),
        ("what did we cook for Thanksgiving", "2023-11-20", "2023-11-27"),  # 23 Nov 2023
        ("on new year's eve", "2023-12-28", "2024-01-04"),
        # the commonest relative times of a few other languages
        ("Was war letzten Samstag im Nachtdienst los?", "2024-05-10", "2024-05-13"),
        ("qu'est-ce qui s'est passé samedi dernier ?", "2024-05-10", "2024-05-13"),
        ("¿qué compré la semana pasada?", "2024-05-01", "2024-05-15"),
        ("was habe ich gestern gekocht?", "2024-05-14", "2024-05-15"),
        ("wen habe ich vor 3 Tagen getroffen?", "2024-05-11", "2024-05-14"),
    ],
)
def test_windows(query: str, start: str, end: str) -> None:
    window = resolve_time_window(query, REF)
    assert window is not None
    assert window.start == day(start)
    assert window.end == day(end)


def test_last_weekend_is_saturday_and_sunday() -> None:
    window = resolve_time_window("what did I do last weekend?", REF)
    assert window is not None and window.start == day("2024-05-11")
    assert window.end == day("2024-05-13")


@pytest.mark.parametrize(
    ("ref", "saturday"),
    [("2024-05-15", "2024-05-18"), ("2024-05-18", "2024-05-18"), ("2024-05-19", "2024-05-18")],
)
def test_this_weekend_is_the_coming_or_current_one(ref: str, saturday: str) -> None:
    window = resolve_time_window("any events this weekend?", day(ref).replace(hour=12))
    assert window is not None and window.start == day(saturday)
    assert window.end == day(saturday) + timedelta(days=2)


def test_last_week_ends_today_and_spans_two_weeks() -> None:
    window = resolve_time_window("what did I read last week", REF)
    assert window is not None and window.end == day("2024-05-15")
    assert window.start == day("2024-05-01")


@pytest.mark.parametrize(
    ("query", "start"),
    [
        ("what changed since March?", "2024-03-01"),
        ("what have I read since last week", "2024-05-01"),
        ("anything new since 3 days ago", "2024-05-11"),
        ("what have we shipped since Christmas?", "2023-12-25"),
    ],
)
def test_since_a_time_is_open_ended(query: str, start: str) -> None:
    window = resolve_time_window(query, REF)
    assert window is not None and window.start == day(start) and window.end is None
    # Without "since" the same time is a closed window.
    closed = resolve_time_window(query.replace("since", "in"), REF)
    assert closed is None or closed.end is not None


def test_time_words_are_searched_apart_from_the_terms() -> None:
    plan = understand("what did we ship in January?", "auto", REF)
    assert plan.terms == ("ship",) and plan.time_terms == ("january",)
    assert understand("what did we ship?", "auto", REF).time_terms == ()


def test_a_foreign_time_is_not_searched_as_words() -> None:
    assert "letzten samstag" in time_phrases("Was war letzten Samstag im Nachtdienst los?")
    assert resolve_time_window("hier ist die Liste", REF) is None  # German "here"


def test_no_time_named() -> None:
    assert resolve_time_window("what is my favourite colour?", REF) is None
    assert resolve_time_window("I may go", REF) is None


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("recommend some video editing resources", "preference"),
        ("when did I last deploy to production?", "temporal"),
        ("which came first, the doctor visit or the camping trip?", "temporal"),
        ("how many different doctors did I visit?", "aggregation"),
        ("how many days since I upgraded Python?", "temporal"),
        ("what is the total amount I spent on luxury items?", "aggregation"),
        ("what is my cat's name?", "simple"),
    ],
)
def test_classify(query: str, kind: str) -> None:
    assert classify(query) == kind


@pytest.mark.parametrize(
    ("query", "advice"),
    [
        ("I was thinking about rearranging my bedroom this weekend. Any tips?", True),
        ("Can you suggest a hotel for my trip to Lisbon?", True),
        ("What should I serve for dinner with my homegrown tomatoes?", True),
        ("Do you have any ideas on how I can find new inspiration?", True),
        ("recommend some video editing resources", True),
        ("What book did Caroline recommend to Melanie?", False),
        ("what was the name of the trail you recommended?", False),
        ("Have you any suggestions for dinner?", True),
        ("Did you recommend a hotel in Lisbon last time?", False),
        ("Has Anna suggested any ideas for the party?", False),
        ("What advice does Gina give to Jon about his business?", False),
        ("what is my favourite colour?", False),
    ],
)
def test_asks_advice(query: str, advice: bool) -> None:
    assert asks_advice(query) is advice


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        # REF is a Wednesday: the Saturday before is 2024-05-11, a day of slack either side.
        ("I received a necklace last Saturday", "2024-05-10", "2024-05-13"),
        ("what did I cook on Monday?", "2024-05-12", "2024-05-15"),
        # Said on a Wednesday, "last Wednesday" is a week back, not today.
        ("who called last Wednesday", "2024-05-07", "2024-05-10"),
    ],
)
def test_weekday_windows(query: str, start: str, end: str) -> None:
    window = resolve_time_window(query, REF)
    assert window is not None
    assert (window.start, window.end) == (day(start), day(end))


def test_recently_is_the_last_month_but_latest_is_an_ordering_not_a_window() -> None:
    window = resolve_time_window("what have I been reading lately?", REF)
    assert window is not None and window.start == day("2024-04-15") and window.end == REF
    # The newest of something may be older than a month; "earliest to latest" spans all time.
    assert resolve_time_window("what is my most recent job title?", REF) is None
    assert resolve_time_window("the order of the museums, earliest to latest", REF) is None


def test_weekday_words_are_time_phrases_not_search_terms() -> None:
    assert "last saturday" in time_phrases("what did I get last Saturday?")


@pytest.mark.parametrize(
    ("query", "order"),
    [
        ("when did I first try sushi? the first time", "earliest"),
        ("what car did I drive initially?", "earliest"),
        ("what is my most recent job title", "latest"),
        ("where do I currently live?", "latest"),
        ("which came first, the doctor visit or the camping trip?", None),
        ("what was the earliest and the latest trip?", None),
        ("what is my cat's name?", None),
    ],
)
def test_time_order(query: str, order: str | None) -> None:
    assert time_order(query) == order


@pytest.mark.parametrize(
    ("query", "relation", "text"),
    [
        ("where did I live before I moved to Lisbon?", "before", "I moved to Lisbon"),
        ("how many weddings since my cousin's wedding?", "since", "my cousin's wedding"),
        (
            "How many days before the team meeting I was preparing for did I attend it?",
            "before",
            "the team meeting",
        ),
        ("what broke after its first service", "after", "its first service"),
    ],
)
def test_anchor_events(query: str, relation: str, text: str) -> None:
    assert anchor_event(query) == Anchor(relation, text)


@pytest.mark.parametrize(
    "query",
    ["what did I do before lunch?", "what happened after last week", "what is my cat's name?"],
)
def test_no_anchor(query: str) -> None:
    # One word is no event; a time is the window's job; most queries have no anchor.
    assert anchor_event(query) is None


def test_anchor_window() -> None:
    assert anchor_window("before", REF) == TimeRange(None, REF)
    assert anchor_window("since", REF) == TimeRange(REF, None)
    assert anchor_window("after", REF) == TimeRange(REF, None)
