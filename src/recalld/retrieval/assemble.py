"""Assembly: the greedy token-budgeted selection behind ``context()``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def fit_budget(items: Sequence[T], cost: Callable[[T], int], budget: int) -> list[T]:
    """Take items in order while they fit; an item too big is skipped, not a stop (CEMS)."""
    chosen: list[T] = []
    used = 0
    for item in items:
        size = cost(item)
        if used + size <= budget:
            chosen.append(item)
            used += size
    return chosen
