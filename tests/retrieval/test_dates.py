from __future__ import annotations

from datetime import UTC, datetime

import pytest

from recalld.retrieval.dates import resolve_time_window
from recalld.retrieval.query import classify

REF = datetime(2024, 5, 15, 12, 0, tzinfo=UTC)  # a Wednesday


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did I eat yesterday?", "2024-05-14", "2024-05-15"),
        ("what did I do today", "2024-05-15", "2024-05-16"),
        ("where did I go 3 days ago?", "2024-05-11", "2024-05-14"),
        ("what happened two weeks ago", "2024-04-27", "2024-05-06"),
        ("what did I buy in March?", "2024-03-01", "2024-04-01"),
        ("what did I buy in March 2022?", "2022-03-01", "2022-04-01"),
        ("in December what happened", "2023-12-01", "2024-01-01"),
        ("what happened on May 3rd", "2024-05-02", "2024-05-05"),
        ("the trip in 2021", "2021-01-01", "2022-01-01"),
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


def test_last_week_ends_today_and_spans_two_weeks() -> None:
    window = resolve_time_window("what did I read last week", REF)
    assert window is not None and window.end == day("2024-05-15")
    assert window.start == day("2024-05-01")


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
