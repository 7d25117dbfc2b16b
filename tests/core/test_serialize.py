"""One JSON shape whatever the Python type a value arrives as: the exact types the results
are made of take a fast path in ``to_json``, and every other type must be written as it
always was (subclasses, numpy scalars and arrays, dates, paths, sets, mappings)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import IntEnum
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from recalld.serialize import to_json


class Level(IntEnum):
    HIGH = 2


class Name(str):
    pass


@dataclass
class Inner:
    when: datetime
    tags: tuple[str, ...] = ()


@dataclass
class Outer:
    kind: ClassVar[str] = "not written"
    inner: Inner
    score: float
    extra: dict[int, object] = field(default_factory=dict)


@dataclass
class Child(Outer):
    level: int = 0


def test_every_kind_of_value_is_written_the_same() -> None:
    value = Child(
        Inner(datetime(2024, 3, 14, 9, 30, tzinfo=UTC), ("a", Name("b"))),
        np.float64(0.5),
        {1: [np.float32(1.5), np.int64(3), np.arange(2)], 2: {Path("/x"), date(2024, 1, 2)}},
        Level.HIGH,
    )
    data = to_json(value)
    assert sorted(data["extra"].pop("2")) == ["/x", "2024-01-02"]  # a set: in any order
    assert json.dumps(data, sort_keys=True) == json.dumps(
        {
            "inner": {"when": "2024-03-14T09:30:00+00:00", "tags": ["a", "b"]},
            "score": 0.5,
            "extra": {"1": [1.5, 3, [0, 1]]},
            "level": 2,
        },
        sort_keys=True,
    )
    assert list(data) == ["inner", "score", "extra", "level"]  # the fields' own order


def test_a_dataclass_class_is_not_written_as_its_fields() -> None:
    with pytest.raises(TypeError, match="cannot serialise"):
        to_json(Inner)
