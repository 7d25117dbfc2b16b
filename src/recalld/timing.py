"""Where a search's time goes: the milliseconds of each stage, measured in the search itself.

The pipeline marks the end of each stage (:meth:`StageClock.lap`): the time since the last
mark goes to that stage. A stage that runs inside another one, anywhere below the pipeline
(the query's embedding, inside reading the candidates), is timed with :func:`timed` and its
time taken out of the enclosing stage's, so the stages never overlap and add up to at most
the search's whole time. The clock of the search running on a thread is found through a
context variable, so the code that embeds needs no clock passed down to it; code running on
another thread (the word channels read beside the embedding) is not timed apart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class StageClock:
    """The stages of one search and their milliseconds, in the order they first ran."""

    def __init__(self) -> None:
        self._mark = self.began = time.perf_counter()
        """When the clock started (``perf_counter``): the search's time counts from it."""
        self._inner = 0.0
        """Seconds timed apart (:func:`timed`) since the last mark."""
        self._depth = 0
        self.ms: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        """The time since the last mark (less what was timed apart) goes to ``stage``."""
        now = time.perf_counter()
        self._add(stage, now - self._mark - self._inner)
        self._mark, self._inner = now, 0.0

    def _add(self, stage: str, seconds: float) -> None:
        self.ms[stage] = self.ms.get(stage, 0.0) + max(seconds, 0.0) * 1000

    @contextmanager
    def apart(self, stage: str) -> Iterator[None]:
        """Time the block as ``stage`` (outermost block only: an embedder that wraps
        another is timed once)."""
        self._depth += 1
        began = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                spent = time.perf_counter() - began
                self._add(stage, spent)
                self._inner += spent

    def rounded(self) -> dict[str, float]:
        """The stages' milliseconds to a microsecond, as ``details`` carries them."""
        return {stage: round(ms, 3) for stage, ms in self.ms.items()}


_CLOCK: ContextVar[StageClock | None] = ContextVar("recalld_stage_clock", default=None)


@contextmanager
def clocked() -> Iterator[StageClock]:
    """A new clock for the search that runs in the block (on this thread)."""
    clock = StageClock()
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def timed(stage: str) -> Iterator[None]:
    """Time the block apart as ``stage`` when a search's clock runs (else nothing)."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    with clock.apart(stage):
        yield
