"""Dates from file names: a daily note is about its day; other notes are evergreen.

Recognised: ``2026-03-14.md``, ``2026_03_14.md``, ``2026.03.14.md``, ``20260314.md``, the
date anywhere in the name between non-digits (``2026-03-14-notes.md``, ``notes-2026-03-14.md``),
and folders ``2026/03/14.md``. ``MEMORY.md`` is always evergreen.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import PurePath

EVERGREEN_NAMES = frozenset({"memory.md"})
"""Compared lower-cased: the workspace's long-term memory file never decays."""
MIN_YEAR, MAX_YEAR = 1970, 2199
"""Eight digits outside these years are an id or a number, not a date."""

_NAME_DATE = re.compile(r"(?<!\d)(\d{4})([-_.]?)(\d{2})\2(\d{2})(?!\d)")


def _valid(year: str, month: str, day: str) -> date | None:
    if not MIN_YEAR <= int(year) <= MAX_YEAR:
        return None
    try:
        return date(int(year), int(month), int(day))
    except ValueError:
        return None


def date_from_path(path: str | PurePath) -> date | None:
    """The day a file is about, from its name (or ``YYYY/MM/DD`` folders), else None."""
    pure = PurePath(path)
    if pure.name.lower() in EVERGREEN_NAMES:
        return None
    for match in _NAME_DATE.finditer(pure.stem):
        found = _valid(match.group(1), match.group(3), match.group(4))
        if found is not None:
            return found
    parts = pure.parts
    if len(parts) >= 3 and re.fullmatch(r"\d{2}", pure.stem):
        year, month = parts[-3], parts[-2]
        if re.fullmatch(r"\d{4}", year) and re.fullmatch(r"\d{2}", month):
            return _valid(year, month, pure.stem)
    return None


def event_time_for(path: str | PurePath) -> datetime | None:
    """Midnight UTC of the file's day (how ``--since 2026-03-14`` reads a date too)."""
    day = date_from_path(path)
    return None if day is None else datetime(day.year, day.month, day.day, tzinfo=UTC)
