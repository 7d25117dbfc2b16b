"""Offline resolution of the time a query names ("last week", "in March", "3 days ago")
into a window relative to a reference time (now, or the caller's ``as_of``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from recalld.records import TimeRange

MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for m in names
}
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple of": 2,
    "few": 3,
    "a few": 3,
    "several": 4,
}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_NUM = (
    r"(\d+|a couple of|a few|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven"
    r"|twelve|several|few)"
)
_AGO = re.compile(rf"\b{_NUM}\s+(day|week|month|year)s?\s+ago\b")
_LAST_N = re.compile(rf"\b(?:last|past|previous)\s+{_NUM}\s+(day|week|month|year)s?\b")
_LAST_UNIT = re.compile(r"\b(last|this|past|previous)\s+(week|weekend|month|year)\b")
_MONTH_NAMES = "|".join(sorted(MONTHS, key=len, reverse=True))
_IN_MONTH = re.compile(rf"\b(?:in|during|of|since)\s+({_MONTH_NAMES})\b\.?(?:\s+(\d{{4}}))?")
_MONTH_DAY = re.compile(
    # "January 1:1" is a meeting, not the first of January.
    rf"\b({_MONTH_NAMES})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?![:/]\d)(?:,?\s+(\d{{4}}))?"
)
_YEAR = re.compile(r"\b(?:in|during)\s+((?:19|20)\d{2})\b")
_NAMED_MONTH = re.compile(
    r"\b(january|february|march|april|june|july|august|september|october|november|december)\b"
)
"""A month's full name anywhere ("May" is left out: it is mostly the verb)."""
WEEKDAYS = {
    name: i
    for i, names in enumerate(
        [
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ]
    )
    for name in names
}
_WEEKDAY = re.compile(
    r"\b(?:last|this past|past|previous|on|this)\s+"
    r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
)
_BEFORE_LAST = re.compile(r"\b(week|month|year) before last\b")
""""The week before last": the unit before the last one."""
_HOLIDAY = re.compile(
    r"\b(?:(?:just |right |shortly |the (?:week|days?) )?(before|after|over|around|at|on|"
    r"during|for|since)\s+)?(?:the\s+)?(christmas eve|christmas|xmas|boxing day|"
    r"new year(?:'?s)? eve|new year(?:'?s)?(?: day)?|halloween|valentine'?s(?: day)?|"
    r"thanksgiving|easter)\b"
)
"""A holiday by name ("just before Christmas", "over Easter", "on Halloween")."""
HOLIDAY_DAYS = 10
"""How far "before" or "after" a holiday reaches; a holiday itself is +-3 days."""
RECENT_DAYS = 30
"""How far back "recently" and "lately" reach."""
WEEKDAY_SLACK_DAYS = 1
"""A weekday names one day; a conversation about it may be dated a day either side."""


def _number(token: str) -> int:
    return int(token) if token.isdigit() else _NUMBERS.get(token, 1)


def _month_range(year: int, month: int) -> TimeRange:
    start = datetime(year, month, 1, tzinfo=None)
    end = datetime(year + (month == 12), month % 12 + 1, 1)
    return TimeRange(start, end)


def _with_tz(window: TimeRange, ref: datetime) -> TimeRange:
    def fix(moment: datetime | None) -> datetime | None:
        if moment is None or moment.tzinfo is not None:
            return moment
        return moment.replace(tzinfo=ref.tzinfo)

    return TimeRange(fix(window.start), fix(window.end))


def _easter(year: int) -> datetime:
    """Western Easter Sunday (the anonymous Gregorian computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    g = (8 * b + 13) // 25
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    leap = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * leap) // 451
    month, day = divmod(h + leap - 7 * m + 114, 31)
    return datetime(year, month, day + 1)


def _holiday_date(name: str, year: int) -> datetime:
    fixed = {
        "christmas eve": (12, 24),
        "christmas": (12, 25),
        "xmas": (12, 25),
        "boxing day": (12, 26),
        "halloween": (10, 31),
    }
    if name in fixed:
        return datetime(year, *fixed[name])
    if name.startswith("new year"):
        return datetime(year, 12, 31) if name.endswith("eve") else datetime(year, 1, 1)
    if name.startswith("valentine"):
        return datetime(year, 2, 14)
    if name == "thanksgiving":  # the fourth Thursday of November (US)
        first = datetime(year, 11, 1)
        return first + timedelta(days=(3 - first.weekday()) % 7 + 21)
    return _easter(year)


def _holiday(text: str, ref: datetime) -> TimeRange | None:
    """The most recent such holiday (this year's, unless it is still to come)."""
    found = _HOLIDAY.search(text)
    if found is None:
        return None
    relation, name = found.groups()
    moment = _holiday_date(name, ref.year)
    if moment > ref.replace(tzinfo=None):
        moment = _holiday_date(name, ref.year - 1)
    if relation == "before":
        return TimeRange(moment - timedelta(days=HOLIDAY_DAYS), moment + timedelta(days=1))
    if relation == "since":
        return TimeRange(moment, None)
    if relation == "after":
        return TimeRange(moment, moment + timedelta(days=HOLIDAY_DAYS))
    return TimeRange(moment - timedelta(days=3), moment + timedelta(days=4))


def _relative(text: str, ref: datetime) -> TimeRange | None:
    day = ref.replace(hour=0, minute=0, second=0, microsecond=0)
    if re.search(r"\bday before yesterday\b", text):
        return TimeRange(day - timedelta(days=2), day - timedelta(days=1))
    if re.search(r"\byesterday\b", text):
        return TimeRange(day - timedelta(days=1), day)
    if re.search(r"\btoday\b|\bthis morning\b|\btonight\b", text):
        return TimeRange(day, day + timedelta(days=1))
    if found := _AGO.search(text):
        span = _number(found.group(1)) * _UNIT_DAYS[found.group(2)]
        slack = max(1, span // 4) if found.group(2) == "day" else max(3, span // 3)
        center = day - timedelta(days=span)
        return TimeRange(center - timedelta(days=slack), center + timedelta(days=slack + 1))
    if found := _LAST_N.search(text):
        span = _number(found.group(1)) * _UNIT_DAYS[found.group(2)]
        return TimeRange(day - timedelta(days=span), ref)
    if found := _WEEKDAY.search(text):
        # The most recent such day before today: "last Saturday" said on a Wednesday is
        # four days back, said on a Saturday a week back.
        back = (day.weekday() - WEEKDAYS[found.group(1)]) % 7 or 7
        moment = day - timedelta(days=back)
        return TimeRange(
            moment - timedelta(days=WEEKDAY_SLACK_DAYS),
            moment + timedelta(days=1 + WEEKDAY_SLACK_DAYS),
        )
    if found := _BEFORE_LAST.search(text):
        span = _UNIT_DAYS[found.group(1)]
        return TimeRange(day - timedelta(days=3 * span), day - timedelta(days=span))
    if found := _LAST_UNIT.search(text):
        which, unit = found.groups()
        if unit == "weekend":
            if which == "this":
                # The weekend under way, or the coming one: "this weekend" is never past.
                saturday = day - timedelta(days=day.weekday() - 5 if day.weekday() >= 5 else 0)
                saturday += timedelta(days=max(0, 5 - day.weekday()))
            else:
                saturday = day - timedelta(days=(day.weekday() - 5) % 7 or 7)
            return TimeRange(saturday, saturday + timedelta(days=2))
        span = _UNIT_DAYS[unit]
        if which == "this":
            return TimeRange(day - timedelta(days=span), ref)
        return TimeRange(day - timedelta(days=2 * span), day)
    if re.search(r"\b(recently|lately)\b", text):
        # "Latest" and "most recent" ask for the newest of something, however old it is
        # (an ordering, see ``time_order``), not for the last month.
        return TimeRange(day - timedelta(days=RECENT_DAYS), ref)
    return None


def _absolute(text: str, ref: datetime) -> TimeRange | None:
    if found := _MONTH_DAY.search(text):
        month, number = MONTHS[found.group(1)], int(found.group(2))
        year = int(found.group(3)) if found.group(3) else ref.year
        if 1 <= number <= 31:
            try:
                start = datetime(year, month, number)
            except ValueError:
                start = None
            if start is not None:
                if not found.group(3) and start > ref.replace(tzinfo=None):
                    start = start.replace(year=year - 1)
                return TimeRange(start - timedelta(days=1), start + timedelta(days=2))
    if found := _IN_MONTH.search(text):
        month = MONTHS[found.group(1)]
        year = int(found.group(2)) if found.group(2) else ref.year
        if not found.group(2) and (year, month) > (ref.year, ref.month):
            year -= 1
        return _month_range(year, month)
    if found := _NAMED_MONTH.search(text):  # "our January 1:1", "the March release"
        month = MONTHS[found.group(1)]
        year = ref.year - 1 if month > ref.month else ref.year
        return _month_range(year, month)
    if found := _YEAR.search(text):
        year = int(found.group(1))
        return TimeRange(datetime(year, 1, 1), datetime(year + 1, 1, 1))
    return None


_VAGUE_NOW = re.compile(
    r"\b(?:these days|nowadays|currently|at the moment|right now|lately|recently)\b"
)
_ALL_PATTERNS = (
    _AGO,
    _BEFORE_LAST,
    _HOLIDAY,
    _LAST_N,
    _WEEKDAY,
    _LAST_UNIT,
    _IN_MONTH,
    _MONTH_DAY,
    _NAMED_MONTH,
    _YEAR,
    _VAGUE_NOW,
)


_DAYS = {
    "monday": "montag|lundi|lunes|lunedì|lunedi|maandag",
    "tuesday": "dienstag|mardi|martes|martedì|martedi|dinsdag",
    "wednesday": "mittwoch|mercredi|miércoles|miercoles|mercoledì|mercoledi|woensdag",
    "thursday": "donnerstag|jeudi|jueves|giovedì|giovedi|donderdag",
    "friday": "freitag|vendredi|viernes|venerdì|venerdi|vrijdag",
    "saturday": "samstag|sonnabend|samedi|sábado|sabado|sabato|zaterdag",
    "sunday": "sonntag|dimanche|domingo|domenica|zondag",
    "week": "woche|semaine|semana|settimana|week",
    "month": "monat|mois|mes|mese|maand",
    "year": "jahr|année|an|año|anno|jaar",
}
_UNITS = {
    "tagen": "day",
    "jours": "day",
    "días": "day",
    "dias": "day",
    "giorni": "day",
    "dagen": "day",
    "wochen": "week",
    "semaines": "week",
    "semanas": "week",
    "settimane": "week",
    "weken": "week",
    "monaten": "month",
    "mois": "month",
    "meses": "month",
    "mesi": "month",
    "maanden": "month",
}
_FOREIGN_TIMES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), english)
    for english, names in _DAYS.items()
    for pattern in (
        # "letzten Samstag", "vorige Woche", "afgelopen zaterdag" (German, Dutch)
        rf"\b(?:letzte[nrs]?|vergangene[nrs]?|vorige[nrs]?|afgelopen)\s+(?:{names})\b",
        # "samedi dernier", "la semaine dernière", "el sábado pasado", "sabato scorso"
        rf"\b(?:{names})\s+(?:derni[eè]re?|pasad[oa]|scors[oa])\b",
    )
) + (
    (
        re.compile(r"\b(?:vorgestern|avant-hier|anteayer|l'altro ieri|eergisteren)\b"),
        "day before yesterday",
    ),
    (re.compile(r"\b(?:gestern|ayer|ieri|gisteren)\b"), "yesterday"),
    (re.compile(r"\b(?:heute|aujourd'hui|hoy|oggi|vandaag)\b"), "today"),
    # "vor 3 Tagen", "il y a 3 jours", "hace 3 días"
    (re.compile(rf"\b(?:vor|il y a|hace)\s+(\d+)\s+({'|'.join(_UNITS)})\b"), "{0} {1}s ago"),
    (re.compile(rf"\b(\d+)\s+({'|'.join(_UNITS)})\s+(?:fa|geleden)\b"), "{0} {1}s ago"),
)
"""The commonest relative times of German, French, Spanish, Italian and Dutch, with their
English wording: the query is read in English after them."""


_ANY_FOREIGN_TIME = re.compile("|".join(f"(?:{p.pattern})" for p, _ in _FOREIGN_TIMES))
"""Any of :data:`_FOREIGN_TIMES`: one search tells most queries apart from them."""


def _in_english(text: str) -> tuple[str, list[str]]:
    """``text`` with the foreign relative times of :data:`_FOREIGN_TIMES` in English, and
    the foreign phrases found."""
    found: list[str] = []
    if _ANY_FOREIGN_TIME.search(text) is None:
        return text, found

    def english_for(template: str) -> Callable[[re.Match[str]], str]:
        def write(match: re.Match[str]) -> str:
            found.append(match.group(0))
            if "{" not in template:
                return template
            return template.format(match.group(1), _UNITS[match.group(2)])

        return write

    for pattern, english in _FOREIGN_TIMES:
        template = ("last " + english) if english in _DAYS else english
        text = pattern.sub(english_for(template), text)
    return text, found


def time_phrases(query: str) -> list[str]:
    """The parts of a query that only say *when* (so they are not searched as words)."""
    text, foreign = _in_english(query.lower())
    found = foreign + [m.group(0) for pattern in _ALL_PATTERNS for m in pattern.finditer(text)]
    found += re.findall(
        r"\b(?:(?:the )?day before yesterday|yesterday|today|tonight|this morning)\b", text
    )
    return found


def resolve_time_window(query: str, reference: datetime) -> TimeRange | None:
    """The time window a query names, or ``None``; naive results take ``reference``'s zone.

    A time outside the calendar ("december 9999", "3000000 years ago") names no window: the
    query is searched without one rather than failing on ordinary words.
    """
    text = _in_english(query.lower())[0]
    try:
        window = (
            _relative(text, reference) or _absolute(text, reference) or _holiday(text, reference)
        )
    except (OverflowError, ValueError):
        return None
    if window is None:
        return None
    if window.start is not None and _SINCE.search(text):
        window = TimeRange(window.start, None)  # "since March": from then on
    return _with_tz(window, reference)


_SINCE = re.compile(
    rf"\bsince\s+(?:the\s+(?:start|beginning)\s+of\s+)?(?:{_MONTH_NAMES}|last|the last|"
    r"\d|a |an |one|two|three|four|five|six|seven|eight|nine|ten|several|few|monday|tuesday|"
    r"wednesday|thursday|friday|saturday|sunday|yesterday|(?:19|20)\d\d)"
)
"""A time named after "since" opens the window to the present ("since March")."""


TimeOrder = str  # "earliest" | "latest"

_EARLIEST = re.compile(
    r"\b(?:the first|first time|at first|earliest|initially|originally|to begin with"
    r"|started out|in the beginning)\b"
)
_LATEST = re.compile(
    r"\b(?:most recent(?:ly)?|latest|the last time|last time|currently|nowadays|these days"
    r"|right now|at the moment|now|still|anymore|any more|so far|up to date)\b"
)


def time_order(query: str) -> TimeOrder | None:
    """Which end of time a query asks about: ``earliest`` ("the first time", "initially"),
    ``latest`` ("most recent", "currently", "now"), or ``None``. A query naming both (which
    came first, the latest or the earliest?) asks for a comparison, not an end: ``None``."""
    text = query.lower()
    early, late = _EARLIEST.search(text) is not None, _LATEST.search(text) is not None
    if early == late:
        return None
    return "earliest" if early else "latest"


@dataclass(frozen=True)
class Anchor:
    """An event a query places its question relative to: "before I moved" is
    ``Anchor("before", "I moved")``. Its time is found by searching for ``text``."""

    relation: str
    """``before``, ``after`` or ``since``."""
    text: str


_ANCHOR = re.compile(
    r"\b(before|after|since)\s+((?:i|we|my|our|the|its|his|her|their)\b[^?.,;!]*)",
    re.IGNORECASE,
)
_ANCHOR_STOP = re.compile(
    r"\s+\b(?:did|do|does|was|were|is|are|have|has|had|and|or|but|what|which|who|how|when"
    r"|where|why)\b.*$",
    re.IGNORECASE,
)
_TRAILING_SUBJECT = re.compile(r"\s+(?:i|we)$", re.IGNORECASE)
"""The subject of a following clause ("the meeting I was preparing for") is not the event."""
MIN_ANCHOR_WORDS = 2
"""An anchor needs a subject and something that happened ("I moved", "the wedding")."""


def anchor_event(query: str) -> Anchor | None:
    """The event a query is relative to ("before I moved", "since the wedding"), or ``None``.

    The event runs from the pronoun or article to the end of the clause; a following
    question word or auxiliary ("... did I ...") ends it. Times ("before last week") are the
    time window's job, not anchors.
    """
    found = _ANCHOR.search(query)
    if found is None:
        return None
    text = _ANCHOR_STOP.sub("", found.group(2)).strip()
    text = _TRAILING_SUBJECT.sub("", text)
    if len(text.split()) < MIN_ANCHOR_WORDS or resolve_time_window(text, datetime.now()):
        return None
    return Anchor(found.group(1).lower(), text)


def anchor_window(relation: str, moment: datetime) -> TimeRange:
    """The window an anchor's time gives: before it, or from it on."""
    if relation == "before":
        return TimeRange(None, moment)
    return TimeRange(moment, None)
