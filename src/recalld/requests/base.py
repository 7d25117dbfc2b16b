"""The pieces every request shares: dates, limits, plain error messages, :func:`parse`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from recalld.errors import InvalidInputError
from recalld.records import (
    MEMORY_TYPES,
    SEARCH_MODES,
    TYPES_ACCEPTED,
    stored_type,
)
from recalld.retrieval.config import PRESETS

MAX_LIMIT = 1000
"""The most hits a search (or memories a list) may ask for."""
MAX_QUERY_CHARS = 10_000
"""The longest query a search or context takes: a question or its key words fit many times
over, and ranking a much longer text would hold a core for seconds."""
DATE_WORDS = "an ISO date or datetime such as 2024-03-14 or 2024-03-14T09:30"
NOT_BLANK = r"\S"
"""The JSON schema pattern of a text that must not be blank (a non-space character)."""
NOTHING_TO_CHANGE = "nothing to change: give at least one field"
ImportFormat = Literal["memories", "jsonl-transcript", "claude-code", "longmemeval", "locomo"]

Model = TypeVar("Model", bound=BaseModel)


def as_utc(moment: datetime | None) -> datetime | None:
    """Naive datetimes are taken as UTC."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


EARLIEST = datetime(2, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)
"""The dates a caller may name (``as_of``, ``since``, ``until``, ``event_time``): a year
inside each end of what Python's ``datetime`` holds, so that the windows and offsets
computed around them ("last december", "two days ago", a zone's offset) stay
representable instead of overflowing."""


def check_moment(moment: datetime, name: str) -> datetime:
    """``moment`` if it lies between :data:`EARLIEST` and :data:`LATEST`.

    Raises:
        ValueError: a clear message naming ``name`` and the range (pydantic's validators
            turn it into :class:`InvalidInputError`).
    """
    try:
        utc = as_utc(moment)
    except (OverflowError, ValueError):  # a zone offset that leaves the calendar
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        raise ValueError(
            f"{name} must lie between {EARLIEST.date()} and {LATEST.date()} (UTC), "
            f"not {moment.isoformat()}"
        )
    return moment


def _check_moment(value: datetime, info: ValidationInfo) -> datetime:
    return check_moment(value, info.field_name or "a date")


def _iso_text(value: Any) -> Any:
    # pydantic would read a number (or a numeric string) as Unix time
    if isinstance(value, bool | int | float) or (
        isinstance(value, str) and not _ISO_START.match(value)
    ):
        raise PydanticCustomError("datetime_type", "expected an ISO date or datetime")
    return value


_ISO_START = re.compile(r"\d{4}-\d{2}-\d{2}")
YEARS = r"^(000[2-9]|00[1-9]\d|0[1-9]\d\d|[1-8]\d{3}|9[0-8]\d\d|99[0-8]\d|999[0-8])-"
"""The years from :data:`EARLIEST` to :data:`LATEST`, as a JSON schema pattern."""

ISO_MOMENT: dict[str, Any] = {
    "type": "string",
    "pattern": YEARS,
    "anyOf": [{"format": "date-time"}, {"format": "date"}],
}
"""The JSON schema of a date a request takes: an ISO datetime, or a date (its midnight),
of a year from 0002 to 9998."""

Moment = Annotated[
    datetime,
    BeforeValidator(_iso_text),
    AfterValidator(_check_moment),
    WithJsonSchema(ISO_MOMENT, "validation"),
]
"""A date a request may carry: an ISO datetime or date string (or a ``datetime``), in range,
or a clear error."""


# -- errors ----------------------------------------------------------------------------------


EXPECTED: Mapping[str, str] = {
    "string_type": "a string",
    "bytes_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "datetime_type": DATE_WORDS,
    "datetime_parsing": DATE_WORDS,
    "datetime_from_date_parsing": DATE_WORDS,
    "date_type": DATE_WORDS,
    "date_parsing": DATE_WORDS,
    "date_from_datetime_parsing": DATE_WORDS,
}
"""What a field of each pydantic type error expects, in the words every door uses."""


def _plain(error: Mapping[str, Any]) -> str:
    """One of pydantic's errors in plain words (no pydantic wording reaches a caller)."""
    kind, ctx = str(error.get("type")), error.get("ctx") or {}
    if kind in EXPECTED:
        return f"expected {EXPECTED[kind]}"
    if kind in ("too_short", "string_too_short"):
        least = ctx.get("min_length", 1)
        if kind == "string_too_short":
            return "must not be empty" if least == 1 else f"needs at least {least} characters"
        return "needs at least one item" if least == 1 else f"needs at least {least} items"
    if kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"takes at most {ctx.get('max_length')} {unit}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("more than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx.get(key)}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "json_invalid":
        return "is not valid JSON"
    return "is not valid"


def describe_errors(errors: Iterable[Mapping[str, Any]], skip: Sequence[str] = ()) -> str:
    """One line for pydantic's error list: our own checks speak for themselves, pydantic's
    are put in plain words (:func:`_plain`) after the field's dotted path. ``skip`` drops
    leading location parts (such as FastAPI's ``body``)."""
    parts: list[str] = []
    errors = list(errors)
    deeper = {tuple(e.get("loc", ()))[:1] for e in errors if len(e.get("loc", ())) > 1}
    for error in errors:
        if error.get("type") == "too_short" and tuple(error.get("loc", ())) in deeper:
            continue  # a list emptied by its refused items: the items' errors say it
        loc = [str(p) for p in error.get("loc", ())]
        while loc and skip and loc[0] in skip:
            loc = loc[1:]
        where = ".".join(loc)
        if error.get("type") == "value_error" and "error" in error.get("ctx", {}):
            text = str(error["ctx"]["error"])
            parts.append(f"{'.'.join(loc[:-1])}: {text}" if len(loc) > 1 else text)
        elif error.get("type") == "extra_forbidden":
            parts.append(f"unknown field {where}")
        elif error.get("type") == "missing":
            parts.append(f"{where} is required")
        else:
            parts.append(f"{where or 'the input'}: {_plain(error)}")
    return "; ".join(dict.fromkeys(parts)) or "invalid input"


def refuse_unstorable(value: object, name: str) -> None:
    """Refuse text no store can hold in ``value`` (a string, or the strings, keys included,
    inside lists, tuples and mappings): a NUL character (U+0000), which PostgreSQL's text
    cannot hold, so that neither backend stores or searches it; and a lone surrogate
    (U+D800-U+DFFF), which is not Unicode text and has no UTF-8 form. Both backends answer
    the same error.

    Raises:
        InvalidInputError: naming the field.
    """
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(
                f"{name or 'input'} contains a NUL character (U+0000), which recalld neither "
                "stores nor searches; remove it"
            )
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(
                    f"{name or 'input'} is not valid Unicode text: {exc.reason} "
                    f"(U+{ord(value[exc.start]):04X} at character {exc.start + 1})"
                ) from None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            refuse_unstorable(key, name)
            refuse_unstorable(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            refuse_unstorable(item, name)


def parse(model: type[Model], data: Any) -> Model:
    """``model`` validated from ``data`` (a mapping, or an instance passed through).

    Raises:
        InvalidInputError: with :func:`describe_errors`' message, or :func:`refuse_unstorable`'s.
    """
    refuse_unstorable(data.model_dump() if isinstance(data, BaseModel) else data, "")
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(describe_errors(exc.errors())) from None


# -- checks shared by several requests -------------------------------------------------------


def check_types(value: Any) -> Any:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple):
        value = [stored_type(t) for t in value]
        bad = [t for t in value if t not in MEMORY_TYPES]
        if bad:
            raise ValueError(f"unknown type(s) {', '.join(map(str, bad))}; use {TYPES_ACCEPTED}")
    return value


def check_query(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # pydantic's type check names the field and the type
    if not value.strip():
        raise ValueError("the query is empty")
    if len(value) > MAX_QUERY_CHARS:
        raise ValueError(
            f"the query has {len(value):,} characters, over the limit of "
            f"{MAX_QUERY_CHARS:,}: search with its key words"
        )
    return value.strip()


def check_mode(value: Any) -> Any:
    if value not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)}")
    return value


def whole(value: Any) -> Any:
    """A float without a fraction is the integer JSON Schema says it is (``5.0`` is ``5``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def check_limit(value: Any) -> Any:
    value = whole(value)
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
    return value


def check_preset(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or value not in PRESETS):
        raise ValueError(f"unknown preset {value!r}; choose one of {', '.join(PRESETS)}")
    return value


def check_memory_type(value: Any) -> Any:
    value = stored_type(value)
    if value not in MEMORY_TYPES:
        raise ValueError(f"type must be one of {TYPES_ACCEPTED}")
    return value


def check_range(name: str, low: float, high: float, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number")
    if not low <= value <= high:  # NaN fails too
        raise ValueError(f"{name} must be between {low} and {high}")
    return value


class RequestModel(BaseModel):
    """What every request model is: unknown fields refused, frozen once made, and each field's
    docstring its description in the JSON schema. A model adds to this config (its schema's
    examples) with ``model_config = ConfigDict(json_schema_extra=...)``; pydantic merges it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
